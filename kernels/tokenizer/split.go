package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Pattern is a pre-tokenization pattern of Hugging Face tokenizers, as the
// tokenizer.json spells it, written out by hand (Go's regexp has neither
// look-ahead nor Oniguruma's classes): at each place the first
// alternative that matches takes the longest run it can.
type Pattern struct {
	Regex string
	piece func(text string) int // the length of the piece that starts text
}

// Split cuts text into the pattern's pieces.
func (p *Pattern) Split(text string) []string {
	var out []string
	for text != "" {
		n := p.piece(text)
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// The patterns this package knows: GPT-2's (a ByteLevel pre-tokenizer's
// own), and the Split patterns of Llama 3 and of Qwen 2 and 3.
var (
	GPT2   = &Pattern{`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, piece}
	Llama3 = &Pattern{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		func(text string) int { return splitPiece(text, 3) }}
	Qwen2 = &Pattern{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		func(text string) int { return splitPiece(text, 1) }}
	Patterns = []*Pattern{GPT2, Llama3, Qwen2}
)

// contractions are the English suffixes the patterns split off first.
var contractions = []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}

// split cuts text as GPT-2's pattern does.
func split(text string) []string { return GPT2.Split(text) }

// class is which of the pattern's runs a character continues.
type class int

const (
	letter class = iota
	number
	other // neither space, letter nor number
	space
)

func classOf(r rune) class {
	switch {
	case unicode.IsLetter(r):
		return letter
	case unicode.IsNumber(r):
		return number
	case unicode.IsSpace(r):
		return space
	}
	return other
}

// piece is the length of the piece of GPT-2's pattern that starts text.
func piece(text string) int {
	for _, c := range contractions {
		if strings.HasPrefix(text, c) {
			return len(c)
		}
	}
	r, size := utf8.DecodeRuneInString(text)
	start := 0 // where the run of one class starts: past an optional leading space
	if r == ' ' && size < len(text) {
		if next, _ := utf8.DecodeRuneInString(text[size:]); classOf(next) != space {
			start, r = size, next
		}
	}
	if c := classOf(r); c != space {
		return start + run(text[start:], c)
	}
	return spaces(text, run(text, space))
}

// spaces is the length of the piece of a run of n bytes of whitespace
// that starts text, by \s+(?!\S)|\s+: all of it at the end of the text,
// else all but its last character (which goes with what follows), unless
// it is a single one.
func spaces(text string, n int) int {
	if n == len(text) {
		return n
	}
	_, last := utf8.DecodeLastRuneInString(text[:n])
	if n > last {
		return n - last
	}
	return n
}

// splitPiece is the length of the piece that starts text by Llama 3's
// pattern (digits up to 3) or Qwen's (digits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitPiece(text string, digits int) int {
	for _, c := range contractions {
		if len(text) >= len(c) && strings.EqualFold(text[:len(c)], c) {
			return len(c)
		}
	}
	r, size := utf8.DecodeRuneInString(text)
	c := classOf(r)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == letter {
		return run(text, letter)
	}
	if c != number && r != '\r' && r != '\n' && size < len(text) {
		if next, _ := utf8.DecodeRuneInString(text[size:]); classOf(next) == letter {
			return size + run(text[size:], letter)
		}
	}
	// \p{N}{1,digits}
	if c == number {
		n := 0
		for k := 0; k < digits && n < len(text); k++ {
			r, size := utf8.DecodeRuneInString(text[n:])
			if classOf(r) != number {
				break
			}
			n += size
		}
		return n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := 0
	if r == ' ' && size < len(text) {
		if next, _ := utf8.DecodeRuneInString(text[size:]); classOf(next) == other {
			start = size
		}
	}
	if start > 0 || c == other {
		n := start + run(text[start:], other)
		for n < len(text) && (text[n] == '\r' || text[n] == '\n') {
			n++
		}
		return n
	}
	// \s*[\r\n]+: the whitespace up to its last line break, if it has one.
	n := run(text, space)
	if last := strings.LastIndexAny(text[:n], "\r\n"); last >= 0 {
		return last + 1
	}
	return spaces(text, n)
}

// run is the length of the run of characters of class c that starts text.
func run(text string, c class) int {
	n := 0
	for n < len(text) {
		r, size := utf8.DecodeRuneInString(text[n:])
		if classOf(r) != c {
			break
		}
		n += size
	}
	return n
}
