// Package tokenizer reads and writes Hugging Face `tokenizer.json` files of
// byte-level BPE tokenizers (the text split by a pattern, each piece's
// bytes mapped to printable characters and merged by rank), and turns
// text into token ids and back: GPT-2's scheme, and Llama 3's and Qwen's
// (a Split by their patterns; Qwen's after NFC; Llama 3's whole-word
// tokens first). It also trains one, so that the generated model presets
// come with a tokenizer (model.Generate). Other tokenizer kinds
// (SentencePiece, WordPiece, other patterns) are refused with a clear
// error.
//
// The reference is Hugging Face's own implementation: testdata/golden.json
// holds the ids @huggingface/tokenizers gives for the generated tokenizer
// with each of the three pre-tokenizations (golden/gen.mjs, `make
// golden-tokenizer`).
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported refuses a tokenizer.json this package does not implement.
var ErrUnsupported = errors.New("unsupported tokenizer")

// Tokenizer is a loaded byte-level BPE tokenizer.
type Tokenizer struct {
	vocab   map[string]int // token → id
	tokens  []string       // id → token ("" where no token has it)
	ranks   map[[2]string]int
	special []Special      // longest first, as they are matched in text
	byFirst map[byte][]int // first byte → indices in special
	isSpec  map[int]bool   // the specials' ids

	pattern      *Pattern // how text is split before the merges
	nfc          bool     // text is NFC-normalized first
	ignoreMerges bool     // a piece that is a token as a whole is that token
}

// Special is an added token: matched whole in the text before the rest is
// split, and left out of a decoding that skips specials.
type Special struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
}

// file is the subset of tokenizer.json this package reads and writes.
type file struct {
	Version      string          `json:"version"`
	AddedTokens  []addedToken    `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	PostProc     json.RawMessage `json:"post_processor"`
	Decoder      *byteLevel      `json:"decoder"`
	Model        bpeModel        `json:"model"`
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type byteLevel struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       bool   `json:"use_regex"`
}

type bpeModel struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  merges         `json:"merges"`
}

// merges are the model's merges in rank order, each two tokens: written
// "a b" by older files, ["a", "b"] by newer ones (which allows a space in a
// token).
type merges [][2]string

func (m *merges) UnmarshalJSON(raw []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return err
	}
	*m = make(merges, len(items))
	for i, it := range items {
		var pair []string
		if err := json.Unmarshal(it, &pair); err == nil && len(pair) == 2 && pair[0] != "" && pair[1] != "" {
			(*m)[i] = [2]string{pair[0], pair[1]}
			continue
		}
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			return fmt.Errorf("merge %d: %s is neither \"a b\" nor [\"a\", \"b\"]", i, it)
		}
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" {
			return fmt.Errorf("merge %d %q is not two tokens", i, s)
		}
		(*m)[i] = [2]string{a, b}
	}
	return nil
}

func (m merges) MarshalJSON() ([]byte, error) {
	out := make([]string, len(m))
	for i, p := range m {
		out[i] = p[0] + " " + p[1]
	}
	return json.Marshal(out)
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads a tokenizer.json document.
func Parse(raw []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	switch {
	case f.Model.Type != "BPE":
		return nil, fmt.Errorf("%w: model %q (only BPE)", ErrUnsupported, f.Model.Type)
	case f.Decoder == nil || f.Decoder.Type != "ByteLevel":
		return nil, fmt.Errorf("%w: only a ByteLevel decoder", ErrUnsupported)
	case f.Model.ByteFallback || f.Model.ContinuingSubwordPrefix != nil && *f.Model.ContinuingSubwordPrefix != "" ||
		f.Model.EndOfWordSuffix != nil && *f.Model.EndOfWordSuffix != "":
		return nil, fmt.Errorf("%w: byte fallback or subword affixes", ErrUnsupported)
	}
	pattern, err := preTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	nfc, err := normalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{vocab: f.Model.Vocab, ranks: map[[2]string]int{}, pattern: pattern, nfc: nfc, ignoreMerges: f.Model.IgnoreMerges}
	for tok, id := range f.Model.Vocab {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("tokenizer.json: token %q has id %d", tok, id)
		}
		t.set(id, tok)
	}
	for rank, p := range f.Model.Merges {
		if _, seen := t.ranks[p]; !seen {
			t.ranks[p] = rank
		}
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.ID > 1<<24 || a.Content == "" {
			return nil, fmt.Errorf("tokenizer.json: added token %q has id %d", a.Content, a.ID)
		}
		t.set(a.ID, a.Content)
		t.special = append(t.special, Special{ID: a.ID, Content: a.Content})
	}
	t.index()
	return t, nil
}

// index orders the specials longest first and indexes them by their first
// byte, for nextSpecial.
func (t *Tokenizer) index() {
	slices.SortStableFunc(t.special, func(x, y Special) int { return len(y.Content) - len(x.Content) })
	t.byFirst = map[byte][]int{}
	t.isSpec = map[int]bool{}
	for k, s := range t.special {
		t.byFirst[s.Content[0]] = append(t.byFirst[s.Content[0]], k)
		t.isSpec[s.ID] = true
	}
}

// preTokenizer recognises the pre-tokenizer: ByteLevel with its own
// pattern (GPT-2's), or a Split by one of the patterns Patterns knows
// followed by ByteLevel without one (Llama 3's and Qwen's layout).
func preTokenizer(raw json.RawMessage) (*Pattern, error) {
	type split struct {
		Type    string `json:"type"`
		Pattern struct {
			Regex string `json:"Regex"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	var pt struct {
		byteLevel
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &pt); err != nil {
		return nil, fmt.Errorf("%w: pre_tokenizer: %v", ErrUnsupported, err)
	}
	if pt.Type == "ByteLevel" && pt.UseRegex && !pt.AddPrefixSpace {
		return GPT2, nil
	}
	if pt.Type == "Sequence" && len(pt.Pretokenizers) == 2 {
		var sp split
		var bl byteLevel
		if json.Unmarshal(pt.Pretokenizers[0], &sp) == nil && json.Unmarshal(pt.Pretokenizers[1], &bl) == nil &&
			sp.Type == "Split" && sp.Behavior == "Isolated" && !sp.Invert && bl.Type == "ByteLevel" && !bl.UseRegex && !bl.AddPrefixSpace {
			for _, p := range Patterns {
				if p.Regex == sp.Pattern.Regex {
					return p, nil
				}
			}
			return nil, fmt.Errorf("%w: split pattern %q (known: GPT-2's, Llama 3's, Qwen's)", ErrUnsupported, sp.Pattern.Regex)
		}
	}
	return nil, fmt.Errorf("%w: only ByteLevel pre-tokenizers (alone, or after a Split by a known pattern) without a prefix space", ErrUnsupported)
}

// normalizer recognises no normalizer, or NFC (Qwen's).
func normalizer(raw json.RawMessage) (nfc bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var n struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &n) == nil && n.Type == "NFC" {
		return true, nil
	}
	return false, fmt.Errorf("%w: normalizer %s (only none or NFC)", ErrUnsupported, raw)
}

func (t *Tokenizer) set(id int, tok string) {
	for len(t.tokens) <= id {
		t.tokens = append(t.tokens, "")
	}
	t.tokens[id] = tok
}

// VocabSize is one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Encode turns text into token ids: added tokens where their text is,
// the rest split by GPT-2's pattern and each piece's bytes merged by BPE.
// Every byte has a token, so every text encodes.
func (t *Tokenizer) Encode(text string) ([]int, error) {
	var ids []int
	for text != "" {
		at, sp := t.nextSpecial(text)
		chunk := text[:at]
		if t.nfc {
			chunk = norm.NFC.String(chunk)
		}
		for _, piece := range t.pattern.Split(chunk) {
			for _, tok := range t.bpe(piece) {
				id, ok := t.vocab[tok]
				if !ok {
					return nil, fmt.Errorf("tokenizer: %q has no id (the vocabulary lacks a byte or a merge's result)", tok)
				}
				ids = append(ids, id)
			}
		}
		if sp == nil {
			break
		}
		ids = append(ids, sp.ID)
		text = text[at+len(sp.Content):]
	}
	return ids, nil
}

// nextSpecial finds the first added token in text (the longest where two
// start at one place): its offset, or len(text) and nil.
func (t *Tokenizer) nextSpecial(text string) (int, *Special) {
	for i := 0; i < len(text); i++ {
		for _, k := range t.byFirst[text[i]] {
			if strings.HasPrefix(text[i:], t.special[k].Content) {
				return i, &t.special[k]
			}
		}
	}
	return len(text), nil
}

// bpe merges one piece's byte-level characters by rank: the pair with the
// lowest rank first, all its occurrences left to right, until no pair of
// neighbours has a merge.
func (t *Tokenizer) bpe(piece string) []string {
	var syms []string
	for i := 0; i < len(piece); i++ {
		syms = append(syms, string(byteRune[piece[i]]))
	}
	if t.ignoreMerges {
		whole := strings.Join(syms, "")
		if _, ok := t.vocab[whole]; ok {
			return []string{whole}
		}
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		a, b := syms[at], syms[at+1]
		out := syms[:0:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				out = append(out, a+b)
				i++
				continue
			}
			out = append(out, syms[i])
		}
		syms = out
	}
	return syms
}

// Decode turns ids back into text; added tokens are left out when
// skipSpecial. Bytes that do not form UTF-8 come out as U+FFFD, as
// Hugging Face's decoder does.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	var b strings.Builder
	var pending []byte // byte-level characters, turned back into bytes
	flush := func() {
		b.WriteString(strings.ToValidUTF8(string(pending), "\uFFFD"))
		pending = pending[:0]
	}
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
			return "", fmt.Errorf("tokenizer: id %d is not in the vocabulary", id)
		}
		tok := t.tokens[id]
		if t.isSpecial(id) {
			if !skipSpecial {
				flush()
				b.WriteString(tok)
			}
			continue
		}
		for _, r := range tok {
			c, ok := runeByte[r]
			if !ok {
				return "", fmt.Errorf("tokenizer: token %q of id %d is not byte-level", tok, id)
			}
			pending = append(pending, c)
		}
	}
	flush()
	return b.String(), nil
}

func (t *Tokenizer) isSpecial(id int) bool { return t.isSpec[id] }

// Tokens is every id's token ("" for an id no token has), in the
// byte-level alphabet tokenizer.json writes; specials are flagged by
// Special. Exporters (GGUF) carry the vocabulary over with them.
func (t *Tokenizer) Tokens() []string { return slices.Clone(t.tokens) }

// Pattern is how text is split before the merges: one of Patterns.
func (t *Tokenizer) Pattern() *Pattern { return t.pattern }

// Special reports whether id is an added special token.
func (t *Tokenizer) Special(id int) bool { return t.isSpec[id] }

// Merges is the merges in rank order.
func (t *Tokenizer) Merges() [][2]string {
	out := make([][2]string, 0, len(t.ranks))
	for pair := range t.ranks {
		out = append(out, pair)
	}
	slices.SortFunc(out, func(a, b [2]string) int { return t.ranks[a] - t.ranks[b] })
	return out
}

// byteRune maps each byte to the printable character GPT-2's byte-level
// scheme writes it as (printable Latin-1 bytes as themselves, the others
// from U+0100 on, in order); runeByte is its inverse.
var byteRune, runeByte = func() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := map[rune]byte{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		br[b], rb[r] = r, byte(b)
	}
	return br, rb
}()
