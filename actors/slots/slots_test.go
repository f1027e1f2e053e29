package slots

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/persistence"
)

// Reservations go to the member with the most free trainers, a session
// keeps the one it holds, none is given past every member's count, and a
// release (repeated or not) frees exactly one.
func TestReserve(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	members := []Member{{"b", 1}, {"a", 2}}
	reserve := func(session string) (string, error) {
		var m string
		err := st.Update(func(tx persistence.Tx) (err error) {
			m, err = Reserve(tx, members, session)
			return err
		})
		return m, err
	}
	release := func(session string) {
		if err := st.Update(func(tx persistence.Tx) error { return Release(tx, session) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ session, want string }{{"s1", "a"}, {"s2", "a"}, {"s1", "a"}, {"s3", "b"}} {
		if got, err := reserve(c.session); err != nil || got != c.want {
			t.Fatalf("%s: %q %v, want %q", c.session, got, err, c.want)
		}
	}
	if _, err := reserve("s4"); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth on three trainers: %v", err)
	}
	if err := st.View(func(tx persistence.Tx) error {
		n, err := Free(tx, members)
		if n != 0 {
			t.Errorf("%d free with every trainer held", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	release("s2")
	release("s2")
	release("never")
	if got, err := reserve("s4"); err != nil || got != "a" {
		t.Fatalf("after a release: %q %v", got, err)
	}
	if _, err := reserve("s5"); !errors.Is(err, ErrFull) {
		t.Fatalf("a repeated release freed two: %v", err)
	}
	// s3's run moves from b to a: counted on a, past its two, and b is free.
	if err := st.Update(func(tx persistence.Tx) error { return Follow(tx, "s3", "a") }); err != nil {
		t.Fatal(err)
	}
	if got, err := reserve("s5"); err != nil || got != "b" {
		t.Fatalf("after s3 followed its run to a: %q %v", got, err)
	}
	release("s3")
	if _, err := reserve("s6"); !errors.Is(err, ErrFull) {
		t.Fatalf("a, over its count, freed a trainer when s3 was released: %v", err)
	}
}
