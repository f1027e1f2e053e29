// Package jcs writes JSON in the RFC 8785 canonical form (JCS): no
// whitespace, object members sorted by the UTF-16 code units of their names,
// strings with the minimal escapes, numbers as ECMAScript prints them. Two
// JSON texts with the same meaning have the same canonical bytes, which is
// what request_hash is computed over.
package jcs

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is returned for input that is not one I-JSON value.
var ErrSyntax = errors.New("jcs: invalid JSON")

// maxDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxDepth = 512

// Canonical returns the canonical form of the JSON value in src. When src is
// an object, its top-level member named skip (if any) is left out: the
// request hash covers every field but itself.
func Canonical(src []byte, skip string) ([]byte, error) {
	p := &parser{src: src}
	p.space()
	out, err := p.value(make([]byte, 0, len(src)), 0, skip) // seldom longer than src
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.src) {
		return nil, p.fail("trailing data")
	}
	return out, nil
}

type parser struct {
	src []byte
	i   int
}

func (p *parser) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrSyntax, what, p.i)
}

func (p *parser) space() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(out []byte, depth int, skip string) ([]byte, error) {
	if depth > maxDepth {
		return nil, p.fail("nesting too deep")
	}
	if p.i >= len(p.src) {
		return nil, p.fail("unexpected end")
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object(out, depth, skip)
	case c == '[':
		return p.array(out, depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendString(out, s), nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number(out)
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(p.src)-p.i >= len(lit) && string(p.src[p.i:p.i+len(lit)]) == lit {
			p.i += len(lit)
			return append(out, lit...), nil
		}
	}
	return nil, p.fail("unexpected character")
}

// member is one object member as object wrote it: its decoded name, and
// the span of out that holds "name":value.
type member struct {
	key      []byte
	from, to int
}

// object writes the members in place as it reads them, and reorders them
// only when they did not arrive sorted (clients that sort their keys, as
// Go's encoding/json does for maps, pay for no copy; the skipped member,
// which clients add last, does not count).
func (p *parser) object(out []byte, depth int, skip string) ([]byte, error) {
	p.i++ // {
	p.space()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		return append(out, "{}"...), nil
	}
	open := len(out)
	out = append(out, '{')
	var buf [16]member
	ms := buf[:0]
	sorted, skippedOne := true, false
	for {
		p.space()
		if p.i >= len(p.src) || p.src[p.i] != '"' {
			return nil, p.fail("expected a member name")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.src) || p.src[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		p.space()
		skipped := depth == 0 && skip != "" && string(k) == skip
		mark := len(out)
		if len(ms) > 0 && !skipped {
			out = append(out, ',')
		}
		from := len(out)
		out = append(appendString(out, k), ':')
		if out, err = p.value(out, depth+1, ""); err != nil {
			return nil, err
		}
		if skipped { // checked like the others, then dropped
			if skippedOne {
				return nil, p.fail("duplicate member " + strconv.Quote(skip))
			}
			out, skippedOne = out[:mark], true
		} else {
			if len(ms) > 0 && compareUTF16(ms[len(ms)-1].key, k) >= 0 {
				sorted = false
			}
			ms = append(ms, member{k, from, len(out)})
		}
		p.space()
		if p.i >= len(p.src) {
			return nil, p.fail("unexpected end in object")
		}
		if p.src[p.i] == ',' {
			p.i++
			continue
		}
		if p.src[p.i] != '}' {
			return nil, p.fail("expected ',' or '}'")
		}
		p.i++
		break
	}
	if sorted {
		return append(out, '}'), nil
	}
	slices.SortFunc(ms, func(a, b member) int { return compareUTF16(a.key, b.key) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(ms[i-1].key, ms[i].key) {
			return nil, p.fail("duplicate member " + strconv.Quote(string(ms[i].key)))
		}
	}
	body := slices.Clone(out[open+1:])
	out = append(out[:open], '{')
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, body[m.from-open-1:m.to-open-1]...)
	}
	return append(out, '}'), nil
}

// compareUTF16 orders names by their UTF-16 code units, as JCS requires.
// That is byte (code point) order except between a character above U+FFFF,
// whose first unit is a surrogate (U+D800–U+DBFF), and one in
// U+E000–U+FFFF.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] == b[0] && a[0] < utf8.RuneSelf {
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			if (ra > 0xFFFF) != (rb > 0xFFFF) {
				ra, rb = firstUnit(ra), firstUnit(rb)
			}
			return cmp.Compare(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r > 0xFFFF {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

func (p *parser) array(out []byte, depth int) ([]byte, error) {
	p.i++ // [
	out = append(out, '[')
	p.space()
	if p.i < len(p.src) && p.src[p.i] == ']' {
		p.i++
		return append(out, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			out = append(out, ',')
		}
		p.space()
		var err error
		if out, err = p.value(out, depth+1, ""); err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.src) {
			return nil, p.fail("unexpected end in array")
		}
		if p.src[p.i] == ',' {
			p.i++
			continue
		}
		if p.src[p.i] != ']' {
			return nil, p.fail("expected ',' or ']'")
		}
		p.i++
		return append(out, ']'), nil
	}
}

// str decodes a JSON string starting at its opening quote. A string with no
// escapes is returned as a view of src.
func (p *parser) str() ([]byte, error) {
	p.i++ // "
	start := p.i
	plain := true
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			if plain {
				s := p.src[start:p.i]
				p.i++
				if !utf8.Valid(s) {
					return nil, p.fail("invalid UTF-8")
				}
				return s, nil
			}
			return p.unescape(start)
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return nil, p.fail("control character in string")
		default:
			p.i++
		}
	}
	return nil, p.fail("unterminated string")
}

// unescape decodes the string from start (after its quote) to the closing
// quote at p.i, then steps past that quote.
func (p *parser) unescape(start int) ([]byte, error) {
	raw := p.src[start:p.i]
	p.i++
	buf := make([]byte, 0, len(raw))
	for j := 0; j < len(raw); {
		c := raw[j]
		if c != '\\' {
			buf = append(buf, c)
			j++
			continue
		}
		if j+1 >= len(raw) {
			return nil, p.fail("bad escape")
		}
		e := raw[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, n, ok := hex4(raw[j:])
			if !ok {
				return nil, p.fail("bad \\u escape")
			}
			j += n
			if utf16.IsSurrogate(r) {
				if j+6 > len(raw) || raw[j] != '\\' || raw[j+1] != 'u' {
					return nil, p.fail("lone surrogate")
				}
				r2, _, ok := hex4(raw[j+2:])
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return nil, p.fail("lone surrogate")
				}
				j += 6
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return nil, p.fail("bad escape")
		}
	}
	if !utf8.Valid(buf) {
		return nil, p.fail("invalid UTF-8")
	}
	return buf, nil
}

func hex4(b []byte) (rune, int, bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v), 4, err == nil
}

// AppendString writes s with JCS's escapes: quote, backslash, and control
// characters (short forms where JSON has them, else \u00xx); all else as is.
func AppendString(out []byte, s string) []byte { return appendString(out, s) }

func appendString[S string | []byte](out []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c >= 0x20:
			out = append(out, c)
		case c == '\b':
			out = append(out, '\\', 'b')
		case c == '\t':
			out = append(out, '\\', 't')
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\f':
			out = append(out, '\\', 'f')
		case c == '\r':
			out = append(out, '\\', 'r')
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return append(out, '"')
}

// number writes the number at p.i as ECMAScript's Number.prototype.toString
// prints the double it denotes. Plain integers of up to 15 digits print as
// written (every such integer is exact), which is the common case of token
// ids and costs no float formatting.
func (p *parser) number(out []byte) ([]byte, error) {
	start := p.i
	if p.src[p.i] == '-' {
		p.i++
	}
	intStart := p.i
	for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
		p.i++
	}
	digits := p.i - intStart
	if digits == 0 || digits > 1 && p.src[intStart] == '0' {
		return nil, p.fail("bad number")
	}
	plain := true
	if p.i < len(p.src) && p.src[p.i] == '.' {
		plain = false
		p.i++
		n := p.i
		for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
			p.i++
		}
		if p.i == n {
			return nil, p.fail("bad fraction")
		}
	}
	if p.i < len(p.src) && (p.src[p.i] == 'e' || p.src[p.i] == 'E') {
		plain = false
		p.i++
		if p.i < len(p.src) && (p.src[p.i] == '+' || p.src[p.i] == '-') {
			p.i++
		}
		n := p.i
		for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
			p.i++
		}
		if p.i == n {
			return nil, p.fail("bad exponent")
		}
	}
	lit := p.src[start:p.i]
	if plain && digits <= 15 && string(lit) != "-0" {
		return append(out, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, p.fail("number out of range")
	}
	return AppendNumber(out, f), nil
}

// AppendNumber writes f as ECMAScript prints a Number: the shortest digits
// that round-trip, in fixed notation for 1e-7 <= |f| < 1e21 and exponent
// notation (e+N / e-N) otherwise.
func AppendNumber(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0')
	}
	if f < 0 {
		out = append(out, '-')
		f = -f
	}
	e := strconv.AppendFloat(nil, f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp := e, 0
	for i, c := range e {
		if c == 'e' {
			mant = e[:i]
			exp, _ = strconv.Atoi(string(e[i+1:]))
			break
		}
	}
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	k, n := len(digits), exp+1 // f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		out = append(out, digits...)
		for range n - k {
			out = append(out, '0')
		}
	case 0 < n && n <= 21:
		out = append(out, digits[:n]...)
		out = append(out, '.')
		out = append(out, digits[n:]...)
	case -6 < n && n <= 0:
		out = append(out, '0', '.')
		for range -n {
			out = append(out, '0')
		}
		out = append(out, digits...)
	default:
		out = append(out, digits[0])
		if k > 1 {
			out = append(out, '.')
			out = append(out, digits[1:]...)
		}
		out = append(out, 'e')
		if n-1 >= 0 {
			out = append(out, '+')
		}
		out = strconv.AppendInt(out, int64(n-1), 10)
	}
	return out
}
