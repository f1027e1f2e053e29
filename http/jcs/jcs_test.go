package jcs

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
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
	for _, bad := range []string{`{"a":1,"a":2}`, `[1,]`, `01`, `"\ud800"`, `{"a" 1}`, `1 2`, `1e999`, "\"\x01\"", `"\x"`, `nul`} {
		if _, err := Canonical([]byte(bad), ""); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzCanonical: canonical output is valid JSON with the same meaning as the
// input, and canonicalising it again changes nothing.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":[1,2.5,-0,1e300],"a":"\u00e9\n"}`, `[true,false,null,"x\"y"]`, `{"":{}}`, `0.1`} {
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
		again, err := Canonical(out, "")
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q (%v)", out, again, err)
		}
	})
}
