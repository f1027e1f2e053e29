package scan

import "testing"

// Each reader takes its plain shape and refuses what lies just outside it.
func TestReaders(t *testing.T) {
	for _, c := range []struct {
		in   string
		read func(*Scanner) bool
		ok   bool
	}{
		{` 0`, uint0, true}, {`123456789012345678`, uint0, true},
		{`1234567890123456789`, uint0, false}, {`01`, uint0, false},
		{`-1`, uint0, false}, {``, uint0, false},
		{`-0.5e-3`, float0, true}, {`1E+2`, float0, true}, {`1.`, float0, false}, {`.5`, float0, false},
		{`1e400`, float0, false}, {`-`, float0, false},
		{`"a b"`, str0, true}, {`"a\"b"`, str0, false}, {"\"a\tb\"", str0, false}, {"\"\xc3\xa9\"", str0, false}, {`"ab`, str0, false},
		{`{"a":[1,{"b":[]},"c",true,false]}`, raw0, true}, {`[null]`, raw0, false}, {`[1,]`, raw0, false},
		{`{"a" 1}`, raw0, false}, {`tru`, raw0, false},
	} {
		s := Scanner{Buf: []byte(c.in)}
		if got := c.read(&s); got != c.ok {
			t.Errorf("%q: %v, want %v", c.in, got, c.ok)
		}
	}
	deep := make([]byte, 0, 2*maxDepth+10)
	for range maxDepth + 2 {
		deep = append(deep, '[')
	}
	for range maxDepth + 2 {
		deep = append(deep, ']')
	}
	if s := (Scanner{Buf: deep}); raw0(&s) {
		t.Error("nesting past maxDepth taken")
	}
}

func uint0(s *Scanner) bool  { _, ok := s.Uint(); return ok }
func float0(s *Scanner) bool { _, ok := s.Float(); return ok }
func str0(s *Scanner) bool   { _, ok := s.Str(); return ok }
func raw0(s *Scanner) bool   { _, ok := s.Raw(); return ok && s.End() }
