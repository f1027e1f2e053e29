package tokenizer

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Corpus is the text the generated tokenizers are trained on: a fixed
// English text, so that every machine trains the same merges.
//
//go:embed corpus.txt
var Corpus string

// Specials are the generated tokenizers' added tokens, at the ids the
// generated presets give them (unknown 0, BOS 1, EOS 2).
var Specials = []string{"<unk>", "<s>", "</s>"}

// Generated is the tokenizer of a generated model of vocab tokens: trained
// on Corpus, with Specials, and the ids past what the corpus teaches
// filled with reserved specials ("<|reserved_N|>", as real tokenizers keep
// them), so that every id the model can sample decodes.
func Generated(vocab int) (*Tokenizer, error) {
	t, err := Train(Corpus, vocab, Specials)
	if err != nil {
		return nil, err
	}
	for id := len(t.tokens); id < vocab; id++ {
		s := fmt.Sprintf("<|reserved_%d|>", id)
		t.vocab[s] = id
		t.set(id, s)
		t.special = append(t.special, Special{ID: id, Content: s})
	}
	t.index()
	return t, nil
}

// Train learns a byte-level BPE tokenizer of at most size tokens from
// corpus: the specials first (ids 0, 1, …), then the 256 bytes, then one
// token per merge, the most frequent pair of neighbours first (ties in
// order of the pair's text), until size or until no pair occurs twice.
func Train(corpus string, size int, specials []string) (*Tokenizer, error) {
	if size < len(specials)+256 {
		return nil, fmt.Errorf("tokenizer: %d tokens cannot hold %d specials and the 256 bytes", size, len(specials))
	}
	t := &Tokenizer{vocab: map[string]int{}, ranks: map[[2]string]int{}, pattern: GPT2}
	for i, s := range specials {
		t.set(i, s)
		t.vocab[s] = i
		t.special = append(t.special, Special{ID: i, Content: s})
	}
	t.index()
	for b := range 256 {
		tok := string(byteRune[b])
		t.vocab[tok] = len(specials) + b
		t.set(len(specials)+b, tok)
	}
	counts := map[string]int{}
	for _, p := range split(corpus) {
		counts[p]++
	}
	type word struct {
		syms  []string
		count int
	}
	var words []word
	for _, p := range slices.Sorted(maps.Keys(counts)) {
		w := word{count: counts[p]}
		for i := 0; i < len(p); i++ {
			w.syms = append(w.syms, string(byteRune[p[i]]))
		}
		words = append(words, w)
	}
	for len(t.tokens) < size {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		top := 0
		for p, n := range pairs { // the most frequent, the first in text order among equals
			if n > top || n == top && slices.Compare(p[:], best[:]) < 0 {
				best, top = p, n
			}
		}
		if top < 2 {
			break
		}
		t.ranks[best] = len(t.ranks)
		merged := best[0] + best[1]
		t.vocab[merged] = len(t.tokens)
		t.set(len(t.tokens), merged)
		for k := range words {
			syms := words[k].syms
			out := syms[:0:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == best[0] && syms[i+1] == best[1] {
					out = append(out, merged)
					i++
					continue
				}
				out = append(out, syms[i])
			}
			words[k].syms = out
		}
	}
	return t, nil
}

// JSON is the tokenizer as a Hugging Face tokenizer.json document.
func (t *Tokenizer) JSON() ([]byte, error) {
	ms := make(merges, len(t.ranks))
	for p, r := range t.ranks {
		ms[r] = p
	}
	f := file{
		Version:      "1.0",
		AddedTokens:  []addedToken{},
		PreTokenizer: json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`),
		Decoder:      &byteLevel{Type: "ByteLevel", TrimOffsets: true, UseRegex: true},
		Model:        bpeModel{Type: "BPE", Vocab: map[string]int{}, Merges: ms},
	}
	for _, s := range slices.SortedFunc(slices.Values(t.special), func(x, y Special) int { return x.ID - y.ID }) {
		f.AddedTokens = append(f.AddedTokens, addedToken{ID: s.ID, Content: s.Content, Special: true})
	}
	for id, tok := range t.tokens {
		if tok != "" {
			f.Model.Vocab[tok] = id
		}
	}
	return json.Marshal(f)
}
