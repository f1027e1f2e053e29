// Package scan reads JSON of a plain shape without reflection, for the
// decoders of the bodies every submission carries: known fields each once,
// no nulls, ASCII strings without escapes, integers without sign, fraction
// or exponent. A method reports false for anything else, and the caller
// then decodes the input with a general decoder, which also explains what
// is wrong with it; so a fast decoder built on it only has to agree with
// the general one where it answers (each has a fuzz test that holds it to
// that).
package scan

import "strconv"

// Scanner reads JSON values from Buf, each method skipping the whitespace
// before what it reads.
type Scanner struct {
	Buf []byte
	i   int
}

func (s *Scanner) ws() {
	for s.i < len(s.Buf) {
		switch s.Buf[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c, the next byte after whitespace, if it is there.
func (s *Scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.Buf) && s.Buf[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.ws()
	return s.i == len(s.Buf)
}

// Object reads {"key": value, ...}, member reading each value (key is a
// slice of Buf).
func (s *Scanner) Object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		key, ok := s.Str()
		if !ok || !s.next(':') || !member(key) {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// Array reads [value, ...], item reading each value.
func (s *Scanner) Array(item func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		if !item() {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// Str reads a string of printable ASCII without escapes: a slice of Buf.
func (s *Scanner) Str() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.Buf) {
		c := s.Buf[s.i]
		switch {
		case c == '"':
			s.i++
			return s.Buf[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// Uint reads an integer of 1 to 18 digits, without sign or leading zero.
func (s *Scanner) Uint() (int64, bool) {
	s.ws()
	start := s.i
	var n int64
	for s.i < len(s.Buf) && s.Buf[s.i] >= '0' && s.Buf[s.i] <= '9' {
		n = n*10 + int64(s.Buf[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	return n, digits > 0 && digits <= 18 && (digits == 1 || s.Buf[start] != '0')
}

// Ints reads an array of Uints into *v (never nil after).
func (s *Scanner) Ints(v *[]int) bool {
	*v = make([]int, 0, 16)
	return s.Array(func() bool {
		n, ok := s.Uint()
		*v = append(*v, int(n))
		return ok
	})
}

// Floats reads an array of numbers into *v (never nil after).
func (s *Scanner) Floats(v *[]float64) bool {
	*v = []float64{}
	return s.Array(func() bool {
		f, ok := s.Float()
		*v = append(*v, f)
		return ok
	})
}

// Float reads a JSON number that parses as a finite float64.
func (s *Scanner) Float() (float64, bool) {
	s.ws()
	start := s.i
	if !s.number() {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(s.Buf[start:s.i]), 64)
	return f, err == nil
}

// number skips a number of the JSON grammar.
func (s *Scanner) number() bool {
	if s.i < len(s.Buf) && s.Buf[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.Buf) && s.Buf[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.Buf) && s.Buf[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.Buf) && (s.Buf[s.i] == 'e' || s.Buf[s.i] == 'E') {
		s.i++
		if s.i < len(s.Buf) && (s.Buf[s.i] == '+' || s.Buf[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// digits skips decimal digits and says how many.
func (s *Scanner) digits() int {
	start := s.i
	for s.i < len(s.Buf) && s.Buf[s.i] >= '0' && s.Buf[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// maxDepth bounds the nesting Raw follows.
const maxDepth = 64

// Raw reads any JSON value of plain strings, numbers, true and false,
// nested at most maxDepth deep, and returns its bytes (a slice of Buf).
func (s *Scanner) Raw() ([]byte, bool) {
	s.ws()
	start := s.i
	if !s.value(0) {
		return nil, false
	}
	return s.Buf[start:s.i], true
}

func (s *Scanner) value(depth int) bool {
	s.ws()
	if s.i == len(s.Buf) || depth > maxDepth {
		return false
	}
	switch c := s.Buf[s.i]; {
	case c == '{':
		return s.Object(func([]byte) bool { return s.value(depth + 1) })
	case c == '[':
		return s.Array(func() bool { return s.value(depth + 1) })
	case c == '"':
		_, ok := s.Str()
		return ok
	case c == 't' || c == 'f':
		for _, lit := range []string{"true", "false"} {
			if len(s.Buf)-s.i >= len(lit) && string(s.Buf[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
	return s.number()
}
