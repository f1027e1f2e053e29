package persistence

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A tenant's records list newest first, a page at a time from a cursor;
// records of a store written before listings were kept are indexed once
// at start, and indexing them again changes nothing.
func TestListing(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acme, other := Tenant{Org: "acme"}, Tenant{Org: "other"}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var want []string
	err = s.Update(func(tx Tx) error {
		for i := range 5 {
			ss := &Session{ID: fmt.Sprintf("wts_%d", i), Tenant: acme, CreatedAt: base.Add(time.Duration(i) * time.Second)}
			if i == 2 {
				ss.Tenant = other
			} else {
				want = append([]string{ss.ID}, want...)
			}
			if err := tx.Put(Sessions, []byte(ss.ID), ss); err != nil { // as before listings: no entry
				return err
			}
		}
		return CreateRun(tx, &Run{ID: "wtr_1", Tenant: acme, CreatedAt: base})
	})
	if err != nil {
		t.Fatal(err)
	}
	page := func(kind string, after []byte, limit int) (ids []string) {
		t.Helper()
		if err := s.View(func(tx Tx) (err error) { ids, err = Listing(tx, acme, kind, after, limit); return err }); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := page("session", nil, 10); len(got) != 0 {
		t.Fatalf("sessions listed before indexing: %v", got)
	}
	if err := IndexListings(s); err != nil {
		t.Fatal(err)
	}
	if got := page("session", nil, 10); !slices.Equal(got, want) {
		t.Fatalf("acme's sessions %v, want %v", got, want)
	}
	second := page("session", ListedKey(acme, "session", base.Add(3*time.Second), "wts_3"), 2)
	if !slices.Equal(second, want[2:4]) {
		t.Fatalf("the page after wts_3: %v, want %v", second, want[2:4])
	}
	if got := page("run", nil, 10); !slices.Equal(got, []string{"wtr_1"}) {
		t.Fatalf("runs %v", got)
	}
	if err := IndexListings(s); err != nil {
		t.Fatal(err)
	}
	if got := page("session", nil, 10); !slices.Equal(got, want) {
		t.Fatalf("after a second indexing, acme's sessions %v, want %v", got, want)
	}
}
