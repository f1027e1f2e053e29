package tokenizer

import (
	"sync"
	"testing"
	"unicode/utf8"
)

var fuzzed = sync.OnceValues(func() (*Tokenizer, error) { return Generated(1024) })

// Any valid text encodes, every id it gives decodes, and decoding gives
// the text back, with each pre-tokenization.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  a\r\n\n b\t", "<s>x</s><unk>", "don'T 12345 ...\r\n", "ünï 中文 🚀\u00a0\u3000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) {
			return
		}
		tok, err := fuzzed()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Patterns {
			tok := *tok
			tok.pattern = p
			ids, err := tok.Encode(text)
			if err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			back, err := tok.Decode(ids, false)
			if err != nil || back != text {
				t.Fatalf("%q with %s: decodes to %q: %v", text, p.Regex[:12], back, err)
			}
		}
	})
}

// Any bytes as a tokenizer.json are refused or read, never a panic; what
// is read encodes and decodes without one.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"decoder":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"added_tokens":[{"id":5,"content":"<s>"}],"model":{"type":"BPE","vocab":{},"merges":[["a","b"]]},"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"decoder":{"type":"ByteLevel"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tok, err := Parse(raw)
		if err != nil {
			return
		}
		ids, _ := tok.Encode("ab <s> ab")
		tok.Decode(ids, false)
		tok.Decode([]int{0, 1, 2, 5, -1}, true)
	})
}
