package limits

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
)

func code(err error) string {
	if err == nil {
		return ""
	}
	return grain.AsError(err).Code
}

// Each queue limit refuses the operation past it, and loads reported again
// replace, not add to, what a grain reported before.
func TestQueueLimits(t *testing.T) {
	c := New(Limits{RunQueue: 3, OrgQueue: 5, NodeQueue: 8, QueueBytes: 1000, OrgSessions: 1, OrgRuns: 1})
	if err := c.Admit("a", "run", 3); code(err) != CodeQueueFull {
		t.Fatalf("the run's own limit: %v", err)
	}
	c.Set("r1", "a", 2, 100)
	c.Set("r1", "a", 2, 100) // the same report again
	c.Set("r2", "a", 3, 100)
	if q := c.Queued(); q.Ops != 5 || q.Bytes != 200 {
		t.Fatalf("node load %+v", q)
	}
	if err := c.Admit("a", "run", 0); code(err) != CodeQueueFull {
		t.Fatalf("the organization's limit: %v", err)
	}
	if err := c.Admit("b", "sampler", 0); err != nil {
		t.Fatalf("another organization under its limit: %v", err)
	}
	c.Set("r3", "b", 3, 100)
	if err := c.Admit("c", "run", 0); code(err) != CodeQueueFull {
		t.Fatalf("the node's limit: %v", err)
	}
	c.Set("r3", "b", 0, 0)
	c.Set("r2", "a", 0, 900)
	if err := c.Admit("c", "run", 0); code(err) != CodeQueueFull {
		t.Fatalf("the node's bytes: %v", err)
	}
	c.Set("r1", "a", 0, 0)
	c.Set("r2", "a", 0, 0)
	if q := c.Queued(); q.Ops != 0 || q.Bytes != 0 || len(c.grains) != 0 || len(c.orgs) != 0 {
		t.Fatalf("after every grain reported empty: %+v, %d grains, %d orgs", q, len(c.grains), len(c.orgs))
	}
}

// An organization's live sessions and runs are counted in the store and
// bounded apart; ending one makes room; a transaction that fails counts
// nothing; a store from before the counts is recounted once.
func TestLiveLimits(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := New(Limits{RunQueue: 1, OrgQueue: 1, NodeQueue: 1, QueueBytes: 1, OrgSessions: 2, OrgRuns: 1})
	open := func(org string, what Live) error {
		return st.Update(func(tx persistence.Tx) error { return c.Open(tx, org, what) })
	}
	closed := func(org string, what Live) {
		if err := st.Update(func(tx persistence.Tx) error { return Close(tx, org, what) }); err != nil {
			t.Fatal(err)
		}
	}
	found := func(tx persistence.Tx) (map[string]*Count, error) {
		return map[string]*Count{"a": {Sessions: 1, Runs: 1}}, nil
	}
	if err := Recount(st, found); err != nil { // a store from before: one live session and run of a
		t.Fatal(err)
	}
	if err := Recount(st, func(persistence.Tx) (map[string]*Count, error) { return nil, errors.New("counted twice") }); err != nil {
		t.Fatalf("a second recount: %v", err)
	}
	if err := open("a", Sessions); err != nil {
		t.Fatal(err)
	}
	if err := open("a", Sessions); code(err) != CodeLimitExceeded {
		t.Fatalf("a session past the limit of two: %v", err)
	}
	if err := open("a", Runs); code(err) != CodeLimitExceeded {
		t.Fatalf("a run past the one found: %v", err)
	}
	if err := open("b", Sessions); err != nil {
		t.Fatalf("another organization: %v", err)
	}
	closed("a", Sessions)
	if err := open("a", Sessions); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	closed("a", Runs)
	err = st.Update(func(tx persistence.Tx) error {
		if err := c.Open(tx, "a", Runs); err != nil {
			return err
		}
		return errors.New("the creation fails after its count")
	})
	if err == nil {
		t.Fatal("the failing transaction succeeded")
	}
	if err := open("a", Runs); err != nil {
		t.Fatalf("a failed creation still counts: %v", err)
	}
}
