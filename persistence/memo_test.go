package persistence

import (
	"errors"
	"fmt"
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
		if err := s.View(func(tx Tx) (err error) { v, ok, err = m.Get(tx, Metrics, key); return }); err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	update := func(fn func(tx Tx) error) error { return s.Update(fn) }

	if v, ok := get(); ok || v != (memoRec{}) {
		t.Fatalf("missing key: got %+v, %v", v, ok)
	}
	if err := update(func(tx Tx) error { return m.Put(tx, Metrics, key, memoRec{1, "mine"}) }); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); !ok || v != (memoRec{1, "mine"}) {
		t.Fatalf("after its own write: got %+v, %v; want the written value, undecoded", v, ok)
	}

	if err := update(func(tx Tx) error { return tx.Put(Metrics, key, memoRec{N: 2}) }); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(); v != (memoRec{N: 2}) {
		t.Fatalf("after another writer: got %+v, want the stored 2", v)
	}
	if v, _ := get(); v != (memoRec{N: 2}) {
		t.Fatalf("read twice: got %+v", v)
	}

	refused := errors.New("refused")
	err = update(func(tx Tx) error {
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

// A memo that found a record in the store file does not search the same
// version of the file again; once a checkpoint writes a new version, it
// does.
func TestMemoFileVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wts.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("k")
	put := func(n int) {
		t.Helper()
		if err := s.Update(func(tx Tx) error { return tx.Put(Metrics, key, memoRec{N: n}) }); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func() { // Close moves every layer into the file
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = Open(path); err != nil {
			t.Fatal(err)
		}
	}
	var m Memo[memoRec]
	get := func() memoRec {
		t.Helper()
		var v memoRec
		if err := s.View(func(tx Tx) (err error) { v, _, err = m.Get(tx, Metrics, key); return }); err != nil {
			t.Fatal(err)
		}
		return v
	}
	put(1)
	checkpoint()
	if v := get(); v != (memoRec{N: 1}) {
		t.Fatalf("from the file: %+v", v)
	}
	// Bytes the file does not hold, and a value no decoding gives: served
	// as they are, the file was not searched.
	m.raw, m.val.Local = []byte{0xc0}, "memo"
	if v := get(); v != (memoRec{1, "memo"}) {
		t.Fatalf("the same version of the file: %+v, want the memo's", v)
	}
	put(2)
	checkpoint()
	if v := get(); v != (memoRec{N: 2}) {
		t.Fatalf("a new version of the file: %+v, want the stored 2", v)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkMemoFile reads a record that a checkpoint moved into the store
// file through its memo, as a grain re-reads its run's session in every
// write.
func BenchmarkMemoFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "wts.db")
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	// A file of some depth: the records of 64 runs' 500 operations.
	for run := range 64 {
		err := s.Update(func(tx Tx) error {
			for seq := range int64(500) {
				if err := tx.Put(Ops, SeqKey(fmt.Sprintf("wtr_%032d", run), seq), memoRec{N: int(seq)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // Close moves every layer into the file
		b.Fatal(err)
	}
	if s, err = Open(path); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	key := SeqKey(fmt.Sprintf("wtr_%032d", 31), 250)
	var m Memo[memoRec]
	b.ResetTimer()
	for b.Loop() {
		err := s.View(func(tx Tx) error {
			_, ok, err := m.Get(tx, Ops, key)
			if !ok {
				return fmt.Errorf("no record")
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
