package codec

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTrip(t *testing.T) {
	for _, src := range []string{
		`{"seq_id":1,"kind":"forward","payload":{"data":[{"model_input":{"token_ids":[0,1,127,128,255,65535,65536,4294967295]}}]}}`,
		`[-1,-32,-33,-129,-32769,-2147483649,9223372036854775807,18446744073709551615]`,
		`{"a":0.5,"b":-1e-7,"c":1e21,"d":"é \" \\ \n\u0001","e":null,"f":true,"g":false,"h":[],"i":{}}`,
	} {
		mp, err := FromJSON([]byte(src))
		if err != nil {
			t.Fatalf("FromJSON(%s): %v", src, err)
		}
		back, err := ToJSON(mp)
		if err != nil {
			t.Fatalf("ToJSON of %s: %v", src, err)
		}
		var want, got any
		if err := json.Unmarshal([]byte(src), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(back, &got); err != nil {
			t.Fatalf("ToJSON gave invalid JSON %s: %v", back, err)
		}
		if w, g := mustJSON(t, want), mustJSON(t, got); w != g {
			t.Errorf("round trip of %s gave %s", src, back)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClientEncoding reads what a msgpack client library writes for the
// API's shapes: float32 and float64 values, every integer width.
func TestClientEncoding(t *testing.T) {
	body := map[string]any{
		"seq_id":  uint8(3),
		"weights": []float32{0.5, 1},
		"lr":      1e-4,
		"tokens":  []int64{1, 300, 70000, 5000000000},
		"neg":     int16(-300),
	}
	mp, err := msgpack.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ToJSON(mp)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	want := `{"lr":0.0001,"neg":-300,"seq_id":3,"tokens":[1,300,70000,5000000000],"weights":[0.5,1]}`
	if s := mustJSON(t, v); s != want {
		t.Errorf("got %s, want %s", s, want)
	}
}

func TestRefused(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	deep := []byte{}
	for range MaxDepth + 2 {
		deep = append(deep, 0x91) // fixarray of one
	}
	deep = append(deep, 0x01)
	for name, src := range map[string][]byte{
		"bin":          enc([]byte{1, 2}),
		"int key":      enc(map[int]int{1: 2}),
		"NaN":          enc(math.NaN()),
		"infinity":     enc(math.Inf(1)),
		"trailing":     append(enc(1), 0x01),
		"truncated":    enc([]int{1, 2, 3})[:2],
		"empty":        {},
		"ext":          {0xd4, 0x01, 0x00},
		"bad utf8":     enc(string([]byte{0xff, 0xfe})),
		"too deep":     deep,
		"huge array":   {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge string":  {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
		"never closed": {0x82, 0xa1, 'a', 0x01},
	} {
		if out, err := ToJSON(src); err == nil {
			t.Errorf("%s: accepted as %s", name, out)
		}
	}
}

func FuzzToJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x",null,true]}`, `[18446744073709551615,-9223372036854775808]`} {
		mp, err := FromJSON([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(mp)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		out, err := ToJSON(src)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("ToJSON gave invalid JSON %q", out)
		}
		mp, err := FromJSON(out)
		if err != nil {
			t.Fatalf("FromJSON(%s): %v", out, err)
		}
		again, err := ToJSON(mp)
		if err != nil {
			t.Fatalf("ToJSON of re-encoded %s: %v", out, err)
		}
		var a, b any
		json.Unmarshal(out, &a)
		json.Unmarshal(again, &b)
		if x, y := mustJSON(t, a), mustJSON(t, b); x != y {
			t.Fatalf("not stable: %s then %s", out, again)
		}
	})
}
