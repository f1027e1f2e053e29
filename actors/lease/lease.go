// Package lease is a session's lease, as etcd's lessor keeps its leases:
// granted with a time to live when the session is created, renewed by
// activity (a heartbeat, an accepted operation), expired by a reminder at
// its deadline, and revoked when the session ends. It is the one home of
// the lease's rules: its bounds and cap, the check, and the extension.
//
// A lease is its own record (persistence.Leases, by session id), so the
// run's grain renews it on every accepted operation without touching the
// session's record, which only the session's grain writes.
package lease

import (
	"fmt"
	"time"

	"github.com/wts-project/wts/persistence"
)

// Bounds of a requested idle_ttl_s (the API refuses others).
const (
	MinTTL     = time.Minute
	MaxTTL     = 24 * time.Hour
	DefaultTTL = time.Hour
)

// Lease is a session's lease as stored.
type Lease struct {
	// Epoch is bumped by every activation of the session's grain: the
	// fence of its writes, shown to callers as lease_epoch.
	Epoch      int64     `msgpack:"epoch"`
	ExpiresAt  time.Time `msgpack:"expires_at"`
	TTLSeconds int64     `msgpack:"ttl_s"`
	// Revoked: the session has ended (closed, timed out, failed) and the
	// lease with it; nothing renews it.
	Revoked bool `msgpack:"revoked"`
}

// TTL is the lease length for a requested idle_ttl_s (0: not given),
// capped by limit (0: no cap; provider_a caps it by its trainers'
// lifetime).
func TTL(requestedSeconds int64, limit time.Duration) time.Duration {
	ttl := DefaultTTL
	if requestedSeconds > 0 {
		ttl = time.Duration(requestedSeconds) * time.Second
	}
	if limit > 0 {
		ttl = min(ttl, limit)
	}
	return ttl
}

// Grant is a new lease of ttl from now.
func Grant(now time.Time, ttl time.Duration) Lease {
	return Lease{Epoch: 1, ExpiresAt: now.Add(ttl), TTLSeconds: int64(ttl / time.Second)}
}

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return time.Duration(l.TTLSeconds) * time.Second }

// Live reports whether the lease holds at now: not revoked, not past its
// deadline.
func (l *Lease) Live(now time.Time) bool { return !l.Revoked && !now.After(l.ExpiresAt) }

// Renew extends a lease that has not been revoked to now plus its TTL, if
// that moves the deadline by at least step (a lease is minutes long, and
// rewriting it on every operation of a busy run would cost a write each for
// milliseconds of lease). It reports whether it moved.
func (l *Lease) Renew(now time.Time, step time.Duration) bool {
	next := now.Add(l.TTL())
	if l.Revoked || next.Sub(l.ExpiresAt) < max(step, 1) {
		return false
	}
	l.ExpiresAt = next
	return true
}

// Revoke ends the lease with its session.
func (l *Lease) Revoke() { l.Revoked = true }

// Get reads session id's lease inside tx; every session has one.
func Get(tx persistence.Tx, id string) (*Lease, error) {
	l := new(Lease)
	ok, err := tx.Get(persistence.Leases, []byte(id), l)
	if err == nil && !ok {
		err = fmt.Errorf("session %s has no lease record", id)
	}
	return l, err
}
