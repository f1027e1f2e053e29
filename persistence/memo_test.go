package persistence

import (
	"errors"
	"path/filepath"
	"testing"
)

// memoRec has a field the store does not keep, which tells a memo's value
// (it has the field) from a fresh decoding (it has not).
type memoRec struct {
	N     int    `msgpack:"n"`
	Local string `msgpack:"-"`
}

// A memo serves what it wrote or decoded while the stored bytes are those,
// and decodes again when they are not: after another writer's write, and
// after its own write failed.
func TestMemo(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := []byte("k")
	var m Memo[memoRec]
	get := func() (memoRec, bool) {
		t.Helper()
		var v memoRec
		var ok bool
		if err := s.View(func(tx *Tx) (err error) { v, ok, err = m.Get(tx, Metrics, key); return }); err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	update := func(fn func(tx *Tx) error) error { return s.Update(fn) }

	if v, ok := get(); ok || v != (memoRec{}) {
		t.Fatalf("missing key: got %+v, %v", v, ok)
	}
	if err := update(func(tx *Tx) error { return m.Put(tx, Metrics, key, memoRec{1, "mine"}) }); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); !ok || v != (memoRec{1, "mine"}) {
		t.Fatalf("after its own write: got %+v, %v; want the written value, undecoded", v, ok)
	}

	if err := update(func(tx *Tx) error { return tx.Put(Metrics, key, memoRec{N: 2}) }); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(); v != (memoRec{N: 2}) {
		t.Fatalf("after another writer: got %+v, want the stored 2", v)
	}
	if v, _ := get(); v != (memoRec{N: 2}) {
		t.Fatalf("read twice: got %+v", v)
	}

	refused := errors.New("refused")
	err = update(func(tx *Tx) error {
		if err := m.Put(tx, Metrics, key, memoRec{3, "lost"}); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("refused write: %v", err)
	}
	if v, _ := get(); v != (memoRec{N: 2}) {
		t.Fatalf("after a failed write: got %+v, want the stored 2", v)
	}
}
