package lease

import (
	"testing"
	"time"
)

func TestTTL(t *testing.T) {
	for _, c := range []struct {
		requested int64
		limit     time.Duration
		want      time.Duration
	}{
		{0, 0, DefaultTTL},
		{120, 0, 2 * time.Minute},
		{86400, 4 * time.Hour, 4 * time.Hour},
		{0, 30 * time.Minute, 30 * time.Minute},
	} {
		if got := TTL(c.requested, c.limit); got != c.want {
			t.Errorf("TTL(%d, %v) = %v, want %v", c.requested, c.limit, got, c.want)
		}
	}
}

// A lease lives until its deadline; renewing moves the deadline to now plus
// its TTL only by at least the step; a revoked lease is dead and stays so.
func TestLeaseLifecycle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := Grant(t0, time.Minute)
	if !l.Live(t0.Add(time.Minute)) || l.Live(t0.Add(time.Minute+1)) || l.Epoch != 1 || l.TTL() != time.Minute {
		t.Fatalf("granted %+v", l)
	}
	if l.Renew(t0.Add(500*time.Millisecond), time.Second) {
		t.Fatal("renewed by less than the step")
	}
	if !l.Renew(t0.Add(30*time.Second), time.Second) || !l.ExpiresAt.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("renewed to %v", l.ExpiresAt)
	}
	l.Revoke()
	if l.Live(t0) || l.Renew(t0.Add(time.Minute), time.Second) {
		t.Fatal("a revoked lease lives or renews")
	}
}
