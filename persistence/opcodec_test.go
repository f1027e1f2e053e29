package persistence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// plainOperation is Operation without its encoder: msgpack encodes it by
// reflection, from the same tags.
type plainOperation Operation

// fillOperation sets every field of an operation to a value that is not
// empty, by reflection, so that a field added to Operation is filled too
// (and fails the test until EncodeMsgpack writes it); its usage holds a
// component with the omitempty fields empty and one with every field set.
func fillOperation(t testing.TB, seq int64) *Operation {
	op := new(Operation)
	fill(t, op, seq)
	return op
}

// fill sets every field of the struct *ptr to a value that is not empty.
func fill(t testing.TB, ptr any, seq int64) {
	v := reflect.ValueOf(ptr).Elem()
	at := time.Date(2026, 11, 22, 3, 4, 5, 678901234, time.UTC)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch x := f.Addr().Interface().(type) {
		case *string:
			*x = "value of " + name
		case *int64:
			*x = seq - int64(i)<<33
		case *bool:
			*x = true
		case *json.RawMessage:
			*x = json.RawMessage(fmt.Sprintf(`{"field":%q}`, name))
		case **string:
			s := "pointed " + name
			*x = &s
		case *time.Time:
			*x = at.Add(time.Duration(i) * time.Second)
		case **time.Time:
			tm := at.Add(-time.Hour)
			*x = &tm
		case *[]Usage:
			var full Usage
			fill(t, &full, seq)
			*x = []Usage{{Meter: "train_tokens", Quantity: 16, CostMicroUSD: 3, SettlementStatus: "settled", ObservedAt: at}, full}
		default:
			t.Fatalf("fill does not know field %s (%s): teach it, and the hand-written encoder", name, f.Type())
		}
	}
}

// Operation's hand-written encoder writes the bytes msgpack's reflection
// writes: for a record with every field set, for the zero record, and for
// one with empty (not nil) raw fields and small and negative numbers, for
// each length form of strings and bytes and each timestamp form; and they
// decode back to the record.
func TestOperationEncoding(t *testing.T) {
	full := fillOperation(t, 1<<40)
	sparse := &Operation{ID: "op_1", SeqID: 3, Result: json.RawMessage{}, Payload: json.RawMessage("{}"), Usage: []Usage{}}
	negative := &Operation{SeqID: -5, CreatedAt: time.Unix(0, 1).UTC()}
	far := time.Date(2600, 1, 2, 3, 4, 5, 6, time.UTC)
	times := &Operation{CreatedAt: time.Unix(1_700_000_000, 0), UpdatedAt: time.Date(1960, 5, 6, 7, 8, 9, 10, time.UTC), ProgressUpdatedAt: &far}
	long := &Operation{ID: strings.Repeat("i", 32), Kind: strings.Repeat("k", 255), Status: strings.Repeat("s", 256),
		RequestHash: strings.Repeat("h", 1<<16), Result: bytes.Repeat([]byte("r"), 256), Progress: bytes.Repeat([]byte("p"), 1<<16),
		Payload: bytes.Repeat([]byte("y"), 255)}
	many := &Operation{Usage: make([]Usage, 17)}
	cases := map[string]*Operation{"full": full, "zero": {}, "sparse": sparse, "negative": negative, "times": times, "long": long, "many usages": many}
	for name, op := range cases {
		got, err := msgpack.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal((*plainOperation)(op))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: hand-written encoding differs from reflection's\n got %x\nwant %x", name, got, want)
			continue
		}
		var back Operation
		if err := msgpack.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := msgpack.Marshal(&back)
		if !bytes.Equal(again, got) {
			t.Errorf("%s: decoding and encoding again changed the record", name)
		}
	}
}

func BenchmarkOperationEncoding(b *testing.B) {
	op := fillOperation(b, 42)
	op.Usage = op.Usage[:1] // an ended forward's record
	for _, c := range []struct {
		name string
		v    any
	}{{"hand", op}, {"reflect", (*plainOperation)(op)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Marshal(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
