// Package codec transcodes request and response bodies between JSON and
// MessagePack. The API has one set of shapes, defined and validated as JSON:
// a msgpack request is turned into the JSON it denotes before anything reads
// it (so validation, idempotency and request_hash see one form), and a
// response is written as JSON and turned into msgpack when the caller asks
// for it. Only the values JSON has cross: maps with string keys, arrays,
// strings, numbers, booleans and nil; bin and ext values are refused.
package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/wts-project/wts/http/jcs"
)

// MaxDepth bounds nesting, as the JSON decoders do, so a hostile body
// cannot exhaust the stack.
const MaxDepth = 128

// ToJSON returns the JSON text of the single msgpack value in src.
func ToJSON(src []byte) ([]byte, error) {
	r := bytes.NewReader(src)
	d := msgpack.NewDecoder(r)
	out, err := toJSON(d, make([]byte, 0, len(src)*2), 0)
	if err != nil {
		return nil, fmt.Errorf("msgpack body: %w", err)
	}
	if r.Len() != 0 {
		return nil, errors.New("msgpack body: data after the first value")
	}
	return out, nil
}

func toJSON(d *msgpack.Decoder, out []byte, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d", MaxDepth)
	}
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return append(out, "null"...), d.DecodeNil()
	case c == msgpcode.True || c == msgpcode.False:
		b, err := d.DecodeBool()
		return strconv.AppendBool(out, b), err
	case c == msgpcode.Uint64:
		n, err := d.DecodeUint64()
		return strconv.AppendUint(out, n, 10), err
	case msgpcode.IsFixedNum(c) || c >= msgpcode.Uint8 && c <= msgpcode.Uint32 || c >= msgpcode.Int8 && c <= msgpcode.Int64:
		n, err := d.DecodeInt64()
		return strconv.AppendInt(out, n, 10), err
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := d.DecodeFloat64()
		if err != nil {
			return nil, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("NaN and infinities have no JSON form")
		}
		return jcs.AppendNumber(out, f), nil
	case msgpcode.IsString(c):
		s, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		if !utf8.ValidString(s) {
			return nil, errors.New("a string is not valid UTF-8")
		}
		return jcs.AppendString(out, s), nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		out = append(out, '[')
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			if out, err = toJSON(d, out, depth+1); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		out = append(out, '{')
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			if k, err := d.PeekCode(); err != nil || !msgpcode.IsString(k) {
				return nil, errors.New("map keys must be strings")
			}
			if out, err = toJSON(d, out, depth+1); err != nil {
				return nil, err
			}
			out = append(out, ':')
			if out, err = toJSON(d, out, depth+1); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	default:
		return nil, fmt.Errorf("type 0x%02x (bin or ext) has no JSON form", c)
	}
}

// FromJSON returns the msgpack encoding of the JSON value in src. Integers
// become msgpack integers, other numbers doubles; object keys are written
// in sorted order so the same value always encodes the same bytes.
func FromJSON(src []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("JSON to msgpack: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(src))
	if err := fromJSON(msgpack.NewEncoder(&buf), v); err != nil {
		return nil, fmt.Errorf("JSON to msgpack: %w", err)
	}
	return buf.Bytes(), nil
}

func fromJSON(e *msgpack.Encoder, v any) error {
	switch v := v.(type) {
	case nil:
		return e.EncodeNil()
	case bool:
		return e.EncodeBool(v)
	case string:
		return e.EncodeString(v)
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return e.EncodeInt(n)
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return e.EncodeUint(n)
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("number %s: %w", v, err)
		}
		return e.EncodeFloat64(f)
	case []any:
		if err := e.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := fromJSON(e, x); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		if err := e.EncodeMapLen(len(v)); err != nil {
			return err
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := e.EncodeString(k); err != nil {
				return err
			}
			if err := fromJSON(e, v[k]); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
}
