package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// contractions are the English suffixes GPT-2's pattern splits off first.
var contractions = []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}

// split cuts text as GPT-2's pre-tokenization pattern does,
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out by hand (Go's regexp has no look-ahead): at each place the
// first alternative that matches takes the longest run it can.
func split(text string) []string {
	var out []string
	for text != "" {
		n := piece(text)
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

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

// piece is the length of the piece that starts text.
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
	// Whitespace: all of it at the end of the text, else all but its last
	// character (which goes with what follows), unless it is a single one.
	n := run(text, space)
	if n == len(text) {
		return n
	}
	_, last := utf8.DecodeLastRuneInString(text[:n])
	if n > last {
		return n - last
	}
	return n
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
