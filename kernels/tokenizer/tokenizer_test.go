package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// generated is the tokenizer the small preset ships (model.Generate), as
// a reader of its file gets it.
func generated(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := Generated(8192)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tok.JSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// The generated tokenizer's ids are Hugging Face's (testdata/golden.json,
// made by @huggingface/tokenizers from the same file), and decoding gives
// the text back.
func TestGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) < 8 {
		t.Fatalf("the golden file holds %d texts: run make golden-tokenizer", len(golden))
	}
	tok := generated(t)
	for _, g := range golden {
		ids, err := tok.Encode(g.Text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, g.IDs) && !(len(ids) == 0 && len(g.IDs) == 0) {
			t.Errorf("%q: ids %v, Hugging Face's %v", g.Text, ids, g.IDs)
		}
		back, err := tok.Decode(ids, false)
		if err != nil || back != g.Text {
			t.Errorf("%q decodes to %q: %v", g.Text, back, err)
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
		`{"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "decoder": {"type": "ByteLevel"}}`,
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
