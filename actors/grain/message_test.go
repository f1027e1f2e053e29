package grain

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

type ref struct {
	RunID string
	SeqID int64
}

type reply struct {
	Op      ref
	Created bool
}

// A request reaches its handler whichever way it came: a value or a pointer
// from this node, msgpack bytes from another, or a value of another type
// (which goes through msgpack, as between nodes).
func TestDecodeEveryForm(t *testing.T) {
	want := ref{RunID: "wtr_1", SeqID: 7}
	body, err := msgpack.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	p := &ref{RunID: "wtr_1", SeqID: 7}
	for name, in := range map[string]In{
		"value":      Value(want),
		"pointer":    Value(p),
		"bytes":      Bytes(body),
		"other type": Value(struct{ RunID string }{"wtr_1"}),
	} {
		got, err := Decode[ref](in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		w := want
		if name == "other type" {
			w.SeqID = 0
		}
		if *got != w {
			t.Fatalf("%s: %+v, want %+v", name, *got, w)
		}
		if name == "pointer" && got != p {
			t.Fatalf("a pointer sent on this node is handed over, not copied")
		}
	}
	if _, err := Decode[ref](Bytes([]byte{0xc1})); err == nil {
		t.Fatal("a malformed body decoded")
	}
}

// A local reply lands in the caller's variable: the same type, a pointer to
// it, or another type through msgpack.
func TestAssignReply(t *testing.T) {
	var a reply
	src := &reply{Created: true}
	src.Op.SeqID = 3
	if err := assign(&a, src); err != nil || a.Op.SeqID != 3 || !a.Created {
		t.Fatalf("pointer: %+v %v", a, err)
	}
	var b reply
	if err := assign(&b, *src); err != nil || b.Op.SeqID != 3 {
		t.Fatalf("value: %+v %v", b, err)
	}
	var c struct{ Created bool }
	if err := assign(&c, src); err != nil || !c.Created {
		t.Fatalf("other type: %+v %v", c, err)
	}
}
