package limits

import (
	"testing"

	"github.com/wts-project/wts/actors/grain"
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

// An organization's live sessions and runs are bounded apart; ending one
// makes room, and what the node finds at start counts without a limit.
func TestLiveLimits(t *testing.T) {
	c := New(Limits{RunQueue: 1, OrgQueue: 1, NodeQueue: 1, QueueBytes: 1, OrgSessions: 2, OrgRuns: 1})
	for range 2 {
		if err := c.Open("a", Sessions); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Open("a", Sessions); code(err) != CodeLimitExceeded {
		t.Fatalf("a session past the limit of two: %v", err)
	}
	if err := c.Open("a", Runs); err != nil {
		t.Fatalf("a run beside the sessions: %v", err)
	}
	if err := c.Open("b", Sessions); err != nil {
		t.Fatalf("another organization: %v", err)
	}
	c.Close("a", Sessions)
	if err := c.Open("a", Sessions); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	c.Found("a", Runs)
	c.Close("a", Runs)
	if err := c.Open("a", Runs); code(err) != CodeLimitExceeded {
		t.Fatalf("the run found at start still counts: %v", err)
	}
}

// A claim opens once however often its transaction runs, and closes
// unless what it counted was stored.
func TestClaim(t *testing.T) {
	c := New(Limits{RunQueue: 1, OrgQueue: 1, NodeQueue: 1, QueueBytes: 1, OrgSessions: 2, OrgRuns: 1})
	cl := c.Claim("o", Sessions)
	for range 3 { // a transaction run three times
		if err := cl.Open(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Keep(true)
	other := c.Claim("o", Sessions)
	if err := other.Open(); err != nil {
		t.Fatalf("the second of two sessions: %v", err)
	}
	other.Keep(false) // not stored after all
	if err := c.Claim("o", Sessions).Open(); err != nil {
		t.Fatalf("a claim not kept still counts: %v", err)
	}
	if err := c.Claim("o", Sessions).Open(); err == nil {
		t.Fatal("a third live session was admitted")
	}
}
