package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

func open(t *testing.T) persistence.Store {
	t.Helper()
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var now = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

func code(err error) string {
	var e *grain.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// fold is the sums a ledger's entries give, in order.
func fold(entries []Entry) Account {
	var a Account
	for i := range entries {
		a.apply(&entries[i])
		a.Entries = entries[i].Seq
	}
	return a
}

// check holds tenant t's ledger to its rules: the sums are the fold of the
// entries, and the headroom is never below zero (the floor is never
// crossed).
func check(t *testing.T, st persistence.Store, tn persistence.Tenant) *Account {
	t.Helper()
	a, err := audit(st, tn)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func audit(st persistence.Store, tn persistence.Tenant) (*Account, error) {
	var a *Account
	var entries []Entry
	err := st.View(func(tx persistence.Tx) (err error) {
		if a, err = Get(tx, tn); err != nil {
			return err
		}
		return Entries(tx, tn, 0, func(e *Entry) bool { entries = append(entries, *e); return true })
	})
	if err != nil {
		return nil, err
	}
	f := fold(entries)
	if f.Granted != a.Granted || f.Settled != a.Settled || f.Pending != a.Pending || f.Reserved != a.Reserved || f.Entries != a.Entries {
		return nil, fmt.Errorf("%s: account %+v is not the fold of its %d entries %+v", tn.Org, *a, len(entries), f)
	}
	if a.Headroom() < 0 {
		return nil, fmt.Errorf("%s: headroom %d: the floor was crossed (%+v)", tn.Org, a.Headroom(), *a)
	}
	return a, nil
}

func TestReservationRules(t *testing.T) {
	st := open(t)
	acme := persistence.Tenant{Org: "acme"}
	openSession := func(id string, requested *int64) (*int64, error) {
		var c *int64
		err := st.Update(func(tx persistence.Tx) (err error) {
			c, err = Open(tx, acme, id, true, requested, now)
			return err
		})
		return c, err
	}
	// A fresh organization has 100 USD of headroom above the floor: the
	// session s1, without a ceiling, takes all of it.
	c, err := openSession("s1", nil)
	if err != nil || *c != DefaultReservation {
		t.Fatalf("first default session: %v, %v", c, err)
	}
	if _, err := openSession("s2", nil); code(err) != CodeInsufficientCredit {
		t.Fatalf("a second one with no headroom left: %v", err)
	}
	// A grant makes room; a default session takes what there is, up to 100 USD.
	if err := st.Update(func(tx persistence.Tx) error { _, err := Credit(tx, acme, 30_000_000, "top-up", now); return err }); err != nil {
		t.Fatal(err)
	}
	if c, err := openSession("s2", nil); err != nil || *c != 30_000_000 {
		t.Fatalf("default session on 30 USD of headroom: %v, %v", c, err)
	}
	// Grants are bounded, so that no sum overflows.
	for _, amount := range []int64{0, -1, MaxGranted} {
		if err := st.Update(func(tx persistence.Tx) error { _, err := Credit(tx, acme, amount, "", now); return err }); code(err) != "validation_error" {
			t.Fatalf("a grant of %d: %v", amount, err)
		}
	}
	// A requested ceiling is reserved exactly, or refused.
	if err := st.Update(func(tx persistence.Tx) error { _, err := Credit(tx, acme, 5_000_000, "", now); return err }); err != nil {
		t.Fatal(err)
	}
	six, five := int64(6_000_000), int64(5_000_000)
	if _, err := openSession("s3", &six); code(err) != CodeInsufficientCredit {
		t.Fatalf("6 USD on 5 of headroom: %v", err)
	}
	if c, err := openSession("s3", &five); err != nil || *c != five {
		t.Fatalf("5 USD on 5 of headroom: %v, %v", c, err)
	}
	// The organization's default is reserved exactly.
	if err := st.Update(func(tx persistence.Tx) error { _, err := SetDefault(tx, acme, &five); return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := openSession("s4", nil); code(err) != CodeInsufficientCredit {
		t.Fatalf("the default of 5 USD on no headroom: %v", err)
	}
	// Ending a session that spent 1 USD gives back the rest.
	if err := st.Update(func(tx persistence.Tx) error {
		if err := Hold(tx, "s1", 2_000_000); err != nil {
			return err
		}
		op := &persistence.Operation{SessionID: "s1", HoldMicroUSD: 2_000_000, Usage: []persistence.Usage{
			{CostMicroUSD: 600_000, SettlementStatus: providers.Settled}, {CostMicroUSD: 400_000, SettlementStatus: providers.Pending}}}
		if err := Charge(tx, op, now); err != nil {
			return err
		}
		return End(tx, "s1", now)
	}); err != nil {
		t.Fatal(err)
	}
	a := check(t, st, acme)
	if a.Reserved != 35_000_000 || a.Settled != 600_000 || a.Pending != 400_000 || a.Headroom() != 99_000_000 {
		t.Fatalf("after s1 ended: %+v, headroom %d", *a, a.Headroom())
	}
	// A byok session reserves nothing and may have no ceiling.
	if err := st.Update(func(tx persistence.Tx) error {
		c, err := Open(tx, acme, "b1", false, nil, now)
		if c != nil {
			t.Errorf("byok ceiling %d, want none", *c)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if b := check(t, st, acme); b.Reserved != a.Reserved || b.Entries != a.Entries {
		t.Fatalf("a byok session changed the ledger: %+v", *b)
	}
}

func TestCeilingHolds(t *testing.T) {
	st := open(t)
	acme := persistence.Tenant{Org: "acme"}
	ceiling := int64(1000)
	if err := st.Update(func(tx persistence.Tx) error { _, err := Open(tx, acme, "s", true, &ceiling, now); return err }); err != nil {
		t.Fatal(err)
	}
	hold := func(n int64) error { return st.Update(func(tx persistence.Tx) error { return Hold(tx, "s", n) }) }
	if err := hold(600); err != nil {
		t.Fatal(err)
	}
	if err := hold(401); code(err) != CodeCostCeiling {
		t.Fatalf("600 held, 401 more on a ceiling of 1000: %v", err)
	}
	if err := hold(400); err != nil {
		t.Fatal(err)
	}
	// The first operation ends costing 100: 900 of room is back.
	if err := st.Update(func(tx persistence.Tx) error {
		return Charge(tx, &persistence.Operation{SessionID: "s", HoldMicroUSD: 600, Usage: []persistence.Usage{{CostMicroUSD: 100}}}, now)
	}); err != nil {
		t.Fatal(err)
	}
	if err := hold(501); code(err) != CodeCostCeiling {
		t.Fatalf("spent 100, held 400, 501 more: %v", err)
	}
	if err := hold(500); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerProperties runs random sessions of two organizations
// concurrently, each as its grains would (one goroutine a session): open,
// hold and charge operations (settled or pending, billed at most their
// hold), settle, end; with grants and charges after the end mixed in. At
// every step each ledger is the fold of its entries and above the floor;
// at the end no micro-dollar is lost or counted twice, and every
// reservation has come back.
func TestLedgerProperties(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { ledgerProperties(t, seed) })
	}
}

func ledgerProperties(t *testing.T, seed uint64) {
	st := open(t)
	tenants := []persistence.Tenant{{Org: "acme"}, {Org: "beta", Live: true}}
	var spent [2]atomic.Int64   // what the sessions' operations were charged
	var granted [2]atomic.Int64 // what operators granted
	var refusedOpen, refusedHold atomic.Int64
	// An auditor reads both ledgers while the sessions run.
	done := make(chan struct{})
	audited := make(chan int)
	go func() {
		n := 0
		defer func() { audited <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, tn := range tenants {
				if _, err := audit(st, tn); err != nil {
					t.Error(err)
					return
				}
			}
			n++
		}
	}()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			ti := w % 2
			tn := tenants[ti]
			for s := range 6 {
				id := fmt.Sprintf("w%d-s%d", w, s)
				if r.IntN(4) == 0 {
					amount := 1 + r.Int64N(20_000_000)
					if err := st.Update(func(tx persistence.Tx) error { _, err := Credit(tx, tn, amount, "", now); return err }); err != nil {
						t.Error(err)
						return
					}
					granted[ti].Add(amount)
				}
				var requested *int64
				if r.IntN(2) == 0 {
					c := 1 + r.Int64N(60_000_000)
					requested = &c
				}
				err := st.Update(func(tx persistence.Tx) error { _, err := Open(tx, tn, id, true, requested, now); return err })
				if code(err) == CodeInsufficientCredit {
					refusedOpen.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				var inflight []*persistence.Operation
				charge := func(op *persistence.Operation) {
					cost := r.Int64N(op.HoldMicroUSD + 1)
					status := providers.Settled
					if r.IntN(2) == 0 {
						status = providers.Pending
					}
					op.Usage = []persistence.Usage{{CostMicroUSD: cost, SettlementStatus: status}}
					if err := st.Update(func(tx persistence.Tx) error { return Charge(tx, op, now) }); err != nil {
						t.Error(err)
					}
					spent[ti].Add(cost)
				}
				for range 1 + r.IntN(12) {
					op := &persistence.Operation{SessionID: id, HoldMicroUSD: 1 + r.Int64N(15_000_000)}
					err := st.Update(func(tx persistence.Tx) error { return Hold(tx, id, op.HoldMicroUSD) })
					if code(err) == CodeCostCeiling {
						refusedHold.Add(1)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					inflight = append(inflight, op)
					if r.IntN(3) > 0 {
						charge(inflight[0])
						inflight = inflight[1:]
					}
				}
				if err := st.Update(func(tx persistence.Tx) error { return End(tx, id, now) }); err != nil {
					t.Error(err)
					return
				}
				for _, op := range inflight { // ended after their session: charged to the ledger directly
					charge(op)
				}
				settleAll(t, st, id)
			}
		}()
	}
	wg.Wait()
	close(done)
	t.Logf("%d audits while running", <-audited)
	if t.Failed() {
		return
	}
	for i, tn := range tenants {
		a := check(t, st, tn)
		if a.Reserved != 0 || a.Pending != 0 {
			t.Errorf("%s: every session ended and settled, but %d reserved and %d pending", tn.Org, a.Reserved, a.Pending)
		}
		if s, err := StatementOf(st, tn, 0, 1); err != nil || len(s.Reservations) != 0 {
			t.Errorf("%s: every session ended, but reservations %+v (%v)", tn.Org, s.Reservations, err)
		}
		if a.Settled != spent[i].Load() || a.Granted != granted[i].Load() {
			t.Errorf("%s: settled %d, granted %d; the sessions were charged %d and granted %d", tn.Org, a.Settled, a.Granted, spent[i].Load(), granted[i].Load())
		}
	}
	t.Logf("refused: %d sessions, %d operations", refusedOpen.Load(), refusedHold.Load())
}

// settleAll settles what session id has pending.
func settleAll(t *testing.T, st persistence.Store, id string) {
	err := st.Update(func(tx persistence.Tx) error {
		b, err := BudgetOf(tx, id)
		if err != nil {
			return err
		}
		return SettlePending(tx, id, b.Pending, now)
	})
	if err != nil {
		t.Error(err)
	}
}
