// Package ledger holds the money rules: each organization's ledger of
// grants, reservations and spend, with the shared credit floor, and each
// session's budget, which holds every admitted operation's estimated cost
// under the session's ceiling. Every amount is integer micro-USD.
//
// An account's sums are kept beside its entries so that a check reads one
// record; every change to them is an entry (never an overwritten number)
// written in the same transaction, so the sums are always the fold of the
// entries (the tests fold them). Both live in the store, so the rules hold across the
// nodes of a cluster: two creations that race read and write the same
// account record, and the store lets only one of them commit on what it
// read.
//
// The formulas (docs/billing.md):
//
//	balance  = granted - settled spend
//	headroom = balance - reserved - pending spend - Floor
//
// A platform-funded session reserves its ceiling when it is created, only
// from headroom; it spends inside that reservation (its budget refuses an
// operation whose estimate would pass the ceiling, and bills an operation
// at most its estimate), so headroom never goes below zero. When the
// session ends, its reservation is released and its spend booked: settled,
// or pending until the provider settles it.
package ledger

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
)

// Floor is the shared credit floor: an organization's headroom is what it
// may still reserve before its balance, less what it has reserved and
// what is pending, would reach -100 USD.
const Floor int64 = -100_000_000

// DefaultReservation is the most a platform-funded session without a
// ceiling (its own or its organization's default) reserves: 100 USD.
const DefaultReservation int64 = 100_000_000

// Codes of the money rules.
const (
	// CodeInsufficientCredit refuses a session whose reservation the
	// organization's headroom cannot cover.
	CodeInsufficientCredit = "insufficient_credit"
	// CodeCostCeiling refuses an operation whose estimated cost would take
	// its session past its ceiling.
	CodeCostCeiling = "cost_ceiling_reached"
)

// Entry kinds.
const (
	Grant   = "grant"   // an operator's credit: granted += amount
	Reserve = "reserve" // a session's ceiling held: reserved += amount
	Release = "release" // a reservation given back: reserved -= amount
	Spend   = "spend"   // settled spend booked: settled += amount
	Pending = "pending" // spend booked, not yet settled: pending += amount
	Settle  = "settle"  // pending spend settled: pending -= amount, settled += amount
)

// Account is a tenant's ledger: its sums, derived from its entries, and its
// settings.
type Account struct {
	Granted  int64 `msgpack:"granted"`
	Settled  int64 `msgpack:"settled"`
	Pending  int64 `msgpack:"pending"`
	Reserved int64 `msgpack:"reserved"`
	// DefaultCeiling is what a platform-funded session without its own
	// ceiling reserves (nil: up to DefaultReservation of the headroom).
	DefaultCeiling *int64 `msgpack:"default_ceiling"`
	// ByokCredential is the provider key that funds the tenant's sessions
	// when they ask for funding auto without naming a credential ("":
	// the platform funds them).
	ByokCredential string `msgpack:"byok_credential,omitempty"`
	// Entries is how many entries the ledger has: the next one's seq is
	// Entries+1.
	Entries int64 `msgpack:"entries"`
}

// Balance is what was granted less what was spent and settled.
func (a *Account) Balance() int64 { return a.Granted - a.Settled }

// Headroom is what the tenant may still reserve.
func (a *Account) Headroom() int64 { return a.Balance() - a.Reserved - a.Pending - Floor }

// Entry is one change to an account.
type Entry struct {
	Seq       int64     `msgpack:"seq"`
	Kind      string    `msgpack:"kind"`
	Amount    int64     `msgpack:"amount"` // micro-USD, > 0
	SessionID string    `msgpack:"session_id,omitempty"`
	Note      string    `msgpack:"note,omitempty"`
	At        time.Time `msgpack:"at"`
}

// apply adds e to the account's sums.
func (a *Account) apply(e *Entry) {
	switch e.Kind {
	case Grant:
		a.Granted += e.Amount
	case Reserve:
		a.Reserved += e.Amount
	case Release:
		a.Reserved -= e.Amount
	case Spend:
		a.Settled += e.Amount
	case Pending:
		a.Pending += e.Amount
	case Settle:
		a.Pending -= e.Amount
		a.Settled += e.Amount
	}
}

// accountKey is tenant t's account key.
func accountKey(t persistence.Tenant) []byte { return persistence.TenantKey(t) }

// within is the prefix of tenant t's entries and reservations: its
// account key and a zero byte.
func within(t persistence.Tenant) []byte { return append(accountKey(t), 0) }

// reservedKey is the key of tenant t's live platform session id.
func reservedKey(t persistence.Tenant, id string) []byte {
	return append(within(t), id...)
}

// entryKey is the key of tenant t's entry seq: seq big-endian after the
// tenant's prefix, so that its entries sort in order.
func entryKey(t persistence.Tenant, seq int64) []byte {
	return binary.BigEndian.AppendUint64(within(t), uint64(seq))
}

// Get reads tenant t's account inside tx (the zero account if it has none).
func Get(tx persistence.Tx, t persistence.Tenant) (*Account, error) {
	a := new(Account)
	if _, err := tx.Get(persistence.Accounts, accountKey(t), a); err != nil {
		return nil, fmt.Errorf("ledger account %s: %w", t.Org, err)
	}
	return a, nil
}

// book appends entries to tenant t's ledger and writes the account with
// their sums; entries of amount 0 are left out.
func book(tx persistence.Tx, t persistence.Tenant, a *Account, now time.Time, entries ...Entry) error {
	for _, e := range entries {
		if e.Amount == 0 {
			continue
		}
		if e.Amount < 0 {
			return fmt.Errorf("ledger %s: negative %s entry %d", t.Org, e.Kind, e.Amount)
		}
		a.Entries++
		e.Seq, e.At = a.Entries, now
		a.apply(&e)
		if err := tx.Put(persistence.Ledger, entryKey(t, e.Seq), &e); err != nil {
			return err
		}
	}
	return tx.Put(persistence.Accounts, accountKey(t), a)
}

// MaxGranted bounds what an organization may be granted in all (100
// billion USD), so that no sum of the ledger can overflow.
const MaxGranted int64 = 100_000_000_000_000_000

// Credit grants tenant t amount micro-USD (an operator's grant).
func Credit(tx persistence.Tx, t persistence.Tenant, amount int64, note string, now time.Time) (*Account, error) {
	if amount <= 0 {
		return nil, refuse("validation_error", "a grant must be at least 1 micro-USD, not %d", amount)
	}
	a, err := Get(tx, t)
	if err != nil {
		return nil, err
	}
	if amount > MaxGranted-a.Granted {
		return nil, refuse("validation_error", "the organization would be granted more than %d micro-USD in all", MaxGranted)
	}
	return a, book(tx, t, a, now, Entry{Kind: Grant, Amount: amount, Note: note})
}

// SetDefault sets tenant t's default session ceiling (nil: none).
func SetDefault(tx persistence.Tx, t persistence.Tenant, ceiling *int64) (*Account, error) {
	if ceiling != nil && *ceiling < 1 {
		return nil, refuse("validation_error", "a default ceiling must be at least 1 micro-USD, not %d", *ceiling)
	}
	return setting(tx, t, func(a *Account) { a.DefaultCeiling = ceiling })
}

// SetByokCredential sets the provider key that funds tenant t's sessions
// by default ("": none); the caller has checked it is the tenant's.
func SetByokCredential(tx persistence.Tx, t persistence.Tenant, id string) (*Account, error) {
	return setting(tx, t, func(a *Account) { a.ByokCredential = id })
}

// setting changes a setting of tenant t's account (no entry: settings are
// not money).
func setting(tx persistence.Tx, t persistence.Tenant, set func(*Account)) (*Account, error) {
	a, err := Get(tx, t)
	if err != nil {
		return nil, err
	}
	set(a)
	return a, tx.Put(persistence.Accounts, accountKey(t), a)
}

// Entries calls fn on tenant t's entries after seq after, in order, until
// fn returns false.
func Entries(tx persistence.Tx, t persistence.Tenant, after int64, fn func(e *Entry) bool) error {
	var from []byte
	if after > 0 {
		from = entryKey(t, after)
	}
	return persistence.Each(tx, persistence.Ledger, within(t), from, func(_ []byte, e *Entry) (bool, error) {
		return fn(e), nil
	})
}

// Statement is a tenant's account, its live platform sessions'
// reservations, and a page of its entries.
type Statement struct {
	Account      Account
	Reservations []Reservation
	Entries      []Entry
	NextAfterSeq int64
}

// Reservation is a live platform session's: its ceiling, reserved on the
// ledger, and what of it is spent and held.
type Reservation struct {
	SessionID string
	Budget    Budget
}

// StatementOf reads tenant t's account, its reservations and up to limit
// of its entries after seq after, at one revision of the store.
func StatementOf(st persistence.Store, t persistence.Tenant, after int64, limit int) (*Statement, error) {
	s := &Statement{Reservations: []Reservation{}, Entries: []Entry{}, NextAfterSeq: after}
	err := st.View(func(tx persistence.Tx) error {
		a, err := Get(tx, t)
		if err != nil {
			return err
		}
		s.Account = *a
		prefix := within(t)
		err = tx.Scan(persistence.Reserved, prefix, nil, func(k, _ []byte) (bool, error) {
			id := string(k[len(prefix):])
			b, err := get(tx, id)
			if err == nil && b != nil {
				s.Reservations = append(s.Reservations, Reservation{SessionID: id, Budget: *b})
			}
			return true, err
		})
		if err != nil {
			return err
		}
		return Entries(tx, t, after, func(e *Entry) bool {
			s.Entries = append(s.Entries, *e)
			s.NextAfterSeq = e.Seq
			return len(s.Entries) < limit
		})
	})
	return s, err
}

// reserve reserves a platform-funded session's ceiling from tenant t's
// headroom and returns it: requested exactly when given, else the
// tenant's default exactly, else up to DefaultReservation of the headroom.
func reserve(tx persistence.Tx, t persistence.Tenant, sessionID string, requested *int64, now time.Time) (int64, error) {
	a, err := Get(tx, t)
	if err != nil {
		return 0, err
	}
	room := a.Headroom()
	var amount int64
	switch {
	case requested != nil:
		amount = *requested
	case a.DefaultCeiling != nil:
		amount = *a.DefaultCeiling
	default:
		amount = min(DefaultReservation, room)
	}
	if amount < 1 || amount > room {
		need := "no headroom is left"
		if amount > 0 {
			need = fmt.Sprintf("the session's ceiling of %d does not fit", amount)
		}
		return 0, refuse(CodeInsufficientCredit,
			"the organization's headroom is %d micro-USD (balance %d, reserved %d, pending spend %d, credit floor %d) and %s: close sessions, ask for a smaller ceiling, or have credit granted",
			room, a.Balance(), a.Reserved, a.Pending, Floor, need)
	}
	return amount, book(tx, t, a, now, Entry{Kind: Reserve, Amount: amount, SessionID: sessionID})
}

func refuse(code, format string, args ...any) *grain.Error {
	return &grain.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
