// Package slots keeps provider_a's dedicated trainers: each node offers a
// number of them (wts serve --dedicated-trainers), and a provider_a session
// reserves one on a node with a free one for its lifetime, so that its
// run's trainer has that node's executor to itself among at most that many.
// The reservations are counted in the store, in the transaction that
// creates the session, so that they hold across the nodes of a cluster;
// they are released when the session or its run ends.
package slots

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/wts-project/wts/persistence"
)

// Member is a cluster member and the dedicated trainers it offers.
type Member struct {
	ID    string // the member's id, as placement records name it
	Slots int
}

// ErrFull is a reservation no member has room for.
var ErrFull = fmt.Errorf("every dedicated trainer is taken")

// countKey is a member's count of reserved slots; sessionKey a session's
// reservation.
func countKey(member string) []byte    { return []byte("count/" + member) }
func sessionKey(session string) []byte { return []byte("session/" + session) }

// Reserve reserves a dedicated trainer for session on the member of
// members with the most free ones (of those, the first by id, so that
// every node breaks ties alike), and returns that member; ErrFull when
// none has one. A session that holds one keeps it.
func Reserve(tx persistence.Tx, members []Member, session string) (string, error) {
	var held string
	if ok, err := tx.Get(persistence.Slots, sessionKey(session), &held); err != nil || ok {
		return held, err
	}
	best, free := "", 0
	for _, m := range slices.SortedFunc(slices.Values(members), func(a, b Member) int { return cmp.Compare(a.ID, b.ID) }) {
		var n int
		if _, err := tx.Get(persistence.Slots, countKey(m.ID), &n); err != nil {
			return "", err
		}
		if m.Slots-n > free {
			best, free = m.ID, m.Slots-n
		}
	}
	if best == "" {
		return "", ErrFull
	}
	return best, change(tx, best, session, +1)
}

// Release gives back session's dedicated trainer, if it holds one.
func Release(tx persistence.Tx, session string) error {
	var member string
	if ok, err := tx.Get(persistence.Slots, sessionKey(session), &member); err != nil || !ok {
		return err
	}
	return change(tx, member, session, -1)
}

// Follow moves session's dedicated trainer, if it holds one, to member,
// where its run now lives (the member it was reserved on died or left,
// and the run was placed anew): it is counted there, past that member's
// count if need be, so that new sessions see the member as full as it is.
func Follow(tx persistence.Tx, session, member string) error {
	var held string
	if ok, err := tx.Get(persistence.Slots, sessionKey(session), &held); err != nil || !ok || held == member {
		return err
	}
	if err := change(tx, held, session, -1); err != nil {
		return err
	}
	return change(tx, member, session, +1)
}

// change counts session's reservation on member in (+1) or out (-1).
func change(tx persistence.Tx, member, session string, by int) error {
	var n int
	if _, err := tx.Get(persistence.Slots, countKey(member), &n); err != nil {
		return err
	}
	if err := tx.Put(persistence.Slots, countKey(member), max(n+by, 0)); err != nil {
		return err
	}
	if by < 0 {
		return tx.Delete(persistence.Slots, sessionKey(session))
	}
	return tx.Put(persistence.Slots, sessionKey(session), member)
}

// Free is how many dedicated trainers members have free, read inside tx.
func Free(tx persistence.Tx, members []Member) (int, error) {
	free := 0
	for _, m := range members {
		var n int
		if _, err := tx.Get(persistence.Slots, countKey(m.ID), &n); err != nil {
			return 0, err
		}
		free += max(m.Slots-n, 0)
	}
	return free, nil
}
