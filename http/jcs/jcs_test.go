package jcs

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"unicode/utf16"
)

// The examples of RFC 8785 (sections 3.2.2, 3.2.3 and appendix B).
func TestRFC8785(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{` [ 1 , { "b" : [ ] , "a" : { } } ] `, `[1,{"a":{},"b":[]}]`},
		{`-0`, `0`},
		{`-0.0`, `0`},
		{`123456789012345678`, `123456789012345680`},
	}
	for _, c := range cases {
		got, err := Canonical([]byte(c.in), "")
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestNumbers(t *testing.T) {
	cases := map[uint64]string{
		0x0000000000000000: "0", 0x8000000000000000: "0",
		0x0000000000000001: "5e-324", 0x8000000000000001: "-5e-324",
		0x7fefffffffffffff: "1.7976931348623157e+308", 0xffefffffffffffff: "-1.7976931348623157e+308",
		0x4340000000000000: "9007199254740992", 0xc340000000000000: "-9007199254740992",
		0x4430000000000000: "295147905179352830000",
		0x44b52d02c7e14af5: "9.999999999999997e+22", 0x44b52d02c7e14af6: "1e+23", 0x44b52d02c7e14af7: "1.0000000000000001e+23",
		0x444b1ae4d6e2ef4e: "999999999999999700000", 0x444b1ae4d6e2ef4f: "999999999999999900000", 0x444b1ae4d6e2ef50: "1e+21",
		0x3eb0c6f7a0b5ed8c: "9.999999999999997e-7", 0x3eb0c6f7a0b5ed8d: "0.000001",
		0x41b3de4355555553: "333333333.3333332", 0x41b3de4355555554: "333333333.33333325",
		0x41b3de4355555555: "333333333.3333333", 0x41b3de4355555556: "333333333.3333334",
		0x41b3de4355555557: "333333333.33333343",
		0xbecbf647612f3696: "-0.0000033333333333333333",
		0x43143ff3c1cb0959: "1424953923781206.2",
	}
	for bits, want := range cases {
		if got := string(AppendNumber(nil, math.Float64frombits(bits))); got != want {
			t.Errorf("%016x: got %s, want %s", bits, got, want)
		}
	}
}

func TestSkipAndErrors(t *testing.T) {
	got, err := Canonical([]byte(`{"request_hash":"x","seq_id":1,"payload":{"request_hash":2}}`), "request_hash")
	if err != nil || string(got) != `{"payload":{"request_hash":2},"seq_id":1}` {
		t.Fatalf("skip: %s %v", got, err)
	}
	for in, want := range map[string]string{
		`{"request_hash":"x","b":1,"a":{"d":[],"c":2}}`: `{"a":{"c":2,"d":[]},"b":1}`,
		`{"a":1,"request_hash":"x","z":2}`:              `{"a":1,"z":2}`,
		`{"z":1,"request_hash":"x","a":2}`:              `{"a":2,"z":1}`,
		`{"a":1,"z":2,"request_hash":"x"}`:              `{"a":1,"z":2}`,
		`{"z":1,"a":2,"request_hash":"x"}`:              `{"a":2,"z":1}`,
	} {
		if got, err := Canonical([]byte(in), "request_hash"); err != nil || string(got) != want {
			t.Errorf("skip %s: got %s %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`, `{"request_hash":1,"request_hash":2}`, `[1,]`, `01`, `"\ud800"`, `{"a" 1}`, `1 2`, `1e999`, "\"\x01\"", `"\x"`, `nul`} {
		if _, err := Canonical([]byte(bad), "request_hash"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzCanonical: canonical output is valid JSON with the same meaning as the
// input, and canonicalising it again changes nothing.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":[1,2.5,-0,1e300],"a":"\u00e9\n"}`, `{"\ud83d\ude00":1,"\uff01":{"y":2,"x":[{"b":0,"a":1}]}}`, `[true,false,null,"x\"y"]`, `{"":{}}`, `0.1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonical(in, "")
		var v any
		if json.Unmarshal(in, &v) != nil {
			return // not JSON (or not I-JSON): any refusal is right
		}
		if err != nil {
			return // duplicate names or out-of-range numbers, which encoding/json accepts
		}
		var w any
		if err := json.Unmarshal(out, &w); err != nil {
			t.Fatalf("output %q is not JSON: %v", out, err)
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
		if want := reference(t, in); !bytes.Equal(out, want) {
			t.Fatalf("%q: got %q, the reference gives %q", in, out, want)
		}
		again, err := Canonical(out, "")
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q (%v)", out, again, err)
		}
	})
}

// reference is the canonical form by the plain route: encoding/json decodes
// the value, and each part is written as RFC 8785 defines it, names sorted
// by their UTF-16 code units.
func reference(t *testing.T, in []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var write func(out []byte, v any) []byte
	write = func(out []byte, v any) []byte {
		switch v := v.(type) {
		case nil:
			return append(out, "null"...)
		case bool:
			return strconv.AppendBool(out, v)
		case string:
			return AppendString(out, v)
		case json.Number:
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return AppendNumber(out, f)
		case []any:
			out = append(out, '[')
			for i, e := range v {
				if i > 0 {
					out = append(out, ',')
				}
				out = write(out, e)
			}
			return append(out, ']')
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b string) int {
				return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			})
			out = append(out, '{')
			for i, k := range keys {
				if i > 0 {
					out = append(out, ',')
				}
				out = append(AppendString(out, k), ':')
				out = write(out, v[k])
			}
			return append(out, '}')
		}
		t.Fatalf("unexpected %T", v)
		return nil
	}
	return write(nil, v)
}

// BenchmarkCanonical: a forward operation's body as clients send it (names
// sorted, as Go's encoding/json writes a map, and request_hash added last),
// and the same with them reversed.
func BenchmarkCanonical(b *testing.B) {
	sorted := []byte(`{"idempotency_key":"k-1","kind":"forward","payload":{"data":[{"loss_fn_inputs":{"target_tokens":[1,6,11,16,21,26,31,36,41,46,51,56,61,2,7,12]},"model_input":{"token_ids":[1,6,11,16,21,26,31,36,41,46,51,56,61,2,7,12]}}]},"seq_id":17,"request_hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	reversed := []byte(`{"seq_id":17,"request_hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","payload":{"data":[{"model_input":{"token_ids":[1,6,11,16,21,26,31,36,41,46,51,56,61,2,7,12]},"loss_fn_inputs":{"target_tokens":[1,6,11,16,21,26,31,36,41,46,51,56,61,2,7,12]}}]},"kind":"forward","idempotency_key":"k-1"}`)
	for name, in := range map[string][]byte{"sorted": sorted, "reversed": reversed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Canonical(in, "request_hash"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
