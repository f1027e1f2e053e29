package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// generatedJSON is the tokenizer.json of the small preset (model.Generate).
func generatedJSON(t *testing.T) []byte {
	t.Helper()
	tok, err := Generated(8192)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tok.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// generated is that tokenizer as a reader of its file gets it.
func generated(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := Parse(generatedJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// golden is testdata/golden.json: per variant of the generated tokenizer
// (GPT-2's pre-tokenization, Llama 3's, Qwen's), the settings that make it
// and the ids Hugging Face's tokenizers.js gives each text.
type golden struct {
	Name     string                     `json:"name"`
	Settings map[string]json.RawMessage `json:"settings"`
	Cases    []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	} `json:"cases"`
}

// The generated tokenizer's ids, with each pre-tokenization, are Hugging
// Face's, and decoding gives the text back (bar what NFC changed).
func TestGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var variants []golden
	if err := json.Unmarshal(raw, &variants); err != nil {
		t.Fatal(err)
	}
	if len(variants) != 3 {
		t.Fatalf("the golden file holds %d variants: run make golden-tokenizer", len(variants))
	}
	base := generatedJSON(t)
	for _, v := range variants {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(base, &doc); err != nil {
			t.Fatal(err)
		}
		for k, val := range v.Settings {
			if k == "ignore_merges" {
				var model map[string]json.RawMessage
				json.Unmarshal(doc["model"], &model)
				model[k] = val
				doc["model"], _ = json.Marshal(model)
				continue
			}
			doc[k] = val
		}
		changed, _ := json.Marshal(doc)
		tok, err := Parse(changed)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		for _, c := range v.Cases {
			ids, err := tok.Encode(c.Text)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, c.IDs) && !(len(ids) == 0 && len(c.IDs) == 0) {
				t.Errorf("%s: %q: ids %v, Hugging Face's %v", v.Name, c.Text, ids, c.IDs)
			}
			if back, err := tok.Decode(ids, false); err != nil || back != c.Text && !tok.nfc {
				t.Errorf("%s: %q decodes to %q: %v", v.Name, c.Text, back, err)
			}
		}
	}
}

// Tokenizers of another kind are refused by name; ids outside the
// vocabulary do not decode.
func TestRefusals(t *testing.T) {
	for _, doc := range []string{
		`{"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "decoder": {"type": "ByteLevel"}}`,
		`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}, "decoder": {"type": "ByteLevel"}}`,
		`{"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "decoder": {"type": "ByteLevel"}}`,
		`{"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "decoder": {"type": "ByteLevel"}}`,
	} {
		if _, err := Parse([]byte(doc)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v", doc, err)
		}
	}
	if _, err := Parse([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": ["ab"]}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "decoder": {"type": "ByteLevel"}}`)); err == nil {
		t.Error("a merge of one token was taken")
	}
	tok := generated(t)
	if _, err := tok.Decode([]int{1, 99999}, false); err == nil {
		t.Error("an id outside the vocabulary decoded")
	}
	if s, err := tok.Decode([]int{1, 75, 2}, true); err != nil || s != "H" {
		t.Errorf("skipping specials: %q %v", s, err)
	}
}

// Newer files write each merge as ["a", "b"]: read the same.
func TestMergePairs(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(generatedJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	var pairs [][]string
	for _, m := range model["merges"].([]any) {
		a, b, _ := strings.Cut(m.(string), " ")
		pairs = append(pairs, []string{a, b})
	}
	model["merges"] = pairs
	raw, _ := json.Marshal(doc)
	tok, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	const text = "A small model learns what it is shown."
	want, _ := generated(t).Encode(text)
	if got, err := tok.Encode(text); err != nil || !slices.Equal(got, want) || len(want) >= len(text) {
		t.Fatalf("with merge pairs: %v %v, want %v (merged)", got, err, want)
	}
}
