package ledger

import (
	"fmt"
	"time"

	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// Budget is a session's money: its ceiling, what its admitted operations
// hold, and what it spent. Its run's and its sampler's grains both admit
// under it, so it is a record of its own, read and written in their
// admission and outcome transactions.
type Budget struct {
	Tenant persistence.Tenant `msgpack:"tenant"`
	// Ceiling is the session's max_cost_microusd (nil: none, a byok
	// session's choice).
	Ceiling *int64 `msgpack:"ceiling"`
	// Platform: the ceiling is reserved on the tenant's ledger, and the
	// session's spend is booked there when it ends.
	Platform bool `msgpack:"platform"`
	// Held is the estimates of the operations admitted and not yet ended.
	Held    int64 `msgpack:"held"`
	Settled int64 `msgpack:"settled"`
	Pending int64 `msgpack:"pending"`
	// Ended: the session ended and its reservation was released; what its
	// operations still charge goes to the ledger as it comes.
	Ended bool `msgpack:"ended"`
}

// Spent is the session's spend, settled or not.
func (b *Budget) Spent() int64 { return b.Settled + b.Pending }

// Open makes a new session's budget inside its creation's transaction and
// returns its ceiling: a platform-funded session reserves it on tenant t's
// ledger (requested exactly, else the tenant's default exactly, else up to
// DefaultReservation of the headroom), refused with CodeInsufficientCredit
// past the headroom; a byok session keeps what it asked for (nil: none)
// and draws nothing from the ledger.
func Open(tx persistence.Tx, t persistence.Tenant, sessionID string, platform bool, requested *int64, now time.Time) (*int64, error) {
	b := &Budget{Tenant: t, Ceiling: requested, Platform: platform}
	if platform {
		amount, err := reserve(tx, t, sessionID, requested, now)
		if err != nil {
			return nil, err
		}
		b.Ceiling = &amount
		if err := tx.Put(persistence.Reserved, reservedKey(t, sessionID), true); err != nil {
			return nil, err
		}
	}
	return b.Ceiling, put(tx, sessionID, b)
}

// get reads session id's budget (nil for a session without one: created
// before budgets were kept, it is not bounded).
func get(tx persistence.Tx, id string) (*Budget, error) {
	b := new(Budget)
	ok, err := tx.Get(persistence.Budgets, []byte(id), b)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("budget of session %s: %w", id, err)
		}
		return nil, err
	}
	return b, nil
}

// BudgetOf reads session id's budget inside tx (nil if it has none).
func BudgetOf(tx persistence.Tx, id string) (*Budget, error) { return get(tx, id) }

func put(tx persistence.Tx, id string, b *Budget) error {
	return tx.Put(persistence.Budgets, []byte(id), b)
}

// Hold holds an admitted operation's estimated cost under its session's
// ceiling, refusing it (CodeCostCeiling) when the spend, what is held and
// the estimate together would pass the ceiling.
func Hold(tx persistence.Tx, sessionID string, estimate int64) error {
	b, err := get(tx, sessionID)
	if err != nil || b == nil || estimate <= 0 {
		return err
	}
	if b.Ceiling != nil && b.Spent()+b.Held+estimate > *b.Ceiling {
		return refuse(CodeCostCeiling,
			"the operation's estimated cost of %d micro-USD would take session %s past its ceiling of %d (spent %d, held for admitted operations %d)",
			estimate, sessionID, *b.Ceiling, b.Spent(), b.Held)
	}
	b.Held += estimate
	return put(tx, sessionID, b)
}

// Charge ends op's hold with its cost, in the write that ends it: its
// usage components' costs join the session's spend, settled or pending.
// After the session ended, they go to the tenant's ledger at once. An
// operation is charged once (op.Charged).
func Charge(tx persistence.Tx, op *persistence.Operation, now time.Time) error {
	if op.Charged {
		return nil
	}
	op.Charged = true
	held := op.HoldMicroUSD
	op.HoldMicroUSD = 0
	var settled, pending int64
	for _, u := range op.Usage {
		if u.SettlementStatus == providers.Pending {
			pending += u.CostMicroUSD
		} else {
			settled += u.CostMicroUSD
		}
	}
	if held == 0 && settled == 0 && pending == 0 {
		return nil
	}
	b, err := get(tx, op.SessionID)
	if err != nil || b == nil {
		return err
	}
	b.Held = max(b.Held-held, 0)
	b.Settled += settled
	b.Pending += pending
	if b.Ended && b.Platform {
		if err := bookOn(tx, b.Tenant, op.SessionID, now,
			Entry{Kind: Release, Amount: held}, Entry{Kind: Spend, Amount: settled}, Entry{Kind: Pending, Amount: pending}); err != nil {
			return err
		}
	}
	return put(tx, op.SessionID, b)
}

// SettlePending settles amount of session id's pending spend (the
// provider billed it).
func SettlePending(tx persistence.Tx, id string, amount int64, now time.Time) error {
	b, err := get(tx, id)
	if err != nil || b == nil || amount == 0 {
		return err
	}
	amount = min(amount, b.Pending)
	b.Pending -= amount
	b.Settled += amount
	if b.Ended && b.Platform {
		if err := bookOn(tx, b.Tenant, id, now, Entry{Kind: Settle, Amount: amount}); err != nil {
			return err
		}
	}
	return put(tx, id, b)
}

// End is session id's end: its reservation goes back to the ledger but for
// what its unfinished operations still hold, and its spend is booked.
// Repeats change nothing.
func End(tx persistence.Tx, id string, now time.Time) error {
	b, err := get(tx, id)
	if err != nil || b == nil || b.Ended {
		return err
	}
	b.Ended = true
	if b.Platform {
		if err := tx.Delete(persistence.Reserved, reservedKey(b.Tenant, id)); err != nil {
			return err
		}
		if err := bookOn(tx, b.Tenant, id, now,
			Entry{Kind: Release, Amount: max(*b.Ceiling-b.Held, 0)}, Entry{Kind: Spend, Amount: b.Settled}, Entry{Kind: Pending, Amount: b.Pending}); err != nil {
			return err
		}
	}
	return put(tx, id, b)
}

// bookOn books entries of session id on tenant t's ledger.
func bookOn(tx persistence.Tx, t persistence.Tenant, id string, now time.Time, entries ...Entry) error {
	a, err := Get(tx, t)
	if err != nil {
		return err
	}
	for i := range entries {
		entries[i].SessionID = id
	}
	return book(tx, t, a, now, entries...)
}
