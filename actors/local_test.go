package actors

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A request reaches its handler whichever way it came: a value or a pointer
// from this node, msgpack bytes from another, or a value of another type
// (which goes through msgpack, as between nodes).
func TestDecodeEveryForm(t *testing.T) {
	want := jobRef{RunID: "wtr_1", SeqID: 7}
	body, err := msgpack.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	p := &jobRef{RunID: "wtr_1", SeqID: 7}
	for name, in := range map[string]msg{
		"value":      {val: want},
		"pointer":    {val: p},
		"bytes":      {body: body},
		"other type": {val: struct{ RunID string }{"wtr_1"}},
	} {
		got, err := decode[jobRef](in)
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
	if _, err := decode[jobRef](msg{body: []byte{0xc1}}); err == nil {
		t.Fatal("a malformed body decoded")
	}
}

// A local reply lands in the caller's variable: the same type, a pointer to
// it, or another type through msgpack.
func TestAssignReply(t *testing.T) {
	var a Accepted
	src := &Accepted{Created: true}
	src.Op.SeqID = 3
	if err := assign(&a, src); err != nil || a.Op.SeqID != 3 || !a.Created {
		t.Fatalf("pointer: %+v %v", a, err)
	}
	var b Accepted
	if err := assign(&b, *src); err != nil || b.Op.SeqID != 3 {
		t.Fatalf("value: %+v %v", b, err)
	}
	var c struct{ Created bool }
	if err := assign(&c, src); err != nil || !c.Created {
		t.Fatalf("other type: %+v %v", c, err)
	}
}
