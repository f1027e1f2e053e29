package usage

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// provider_a bills device time, pending until the settlement pass settles
// it (after the delay, not before, and each operation once); provider_b
// bills tokens, settled when observed. A session's cost is "cost_pending"
// until nothing is pending, and the settled amount moves in its budget.
func TestSettlement(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tenant := persistence.Tenant{Org: "acme"}
	ss := persistence.Session{ID: "wts_1", Tenant: tenant, Provider: providers.A, RunID: "wtr_1", Status: states.SessionReady}
	a := &Prices{providers.A, providers.PriceList(providers.A)}
	b := &Prices{providers.B, providers.PriceList(providers.B)}
	done := &executor.Done{Status: states.OpSucceeded, Tokens: 1000, DurationMS: 1500.2}
	trained := persistence.Operation{ID: "wto_1", SessionID: ss.ID, RunID: "wtr_1", SeqID: 1, Kind: payload.ForwardBackward}
	Record(&trained, done, a, now)
	sampled := persistence.Operation{ID: "wto_2", SessionID: ss.ID, RunID: "wtr_1", SeqID: 1, Kind: payload.Sample}
	Record(&sampled, done, a, now)
	pooled := persistence.Operation{ID: "wto_3", Kind: payload.ForwardBackward}
	Record(&pooled, done, b, now)
	for _, op := range []*persistence.Operation{&trained, &sampled} {
		if u := op.Usage; len(u) != 1 || u[0].Meter != providers.MeterDeviceMS || u[0].Quantity != 1501 || u[0].SettlementStatus != providers.Pending ||
			u[0].CostMicroUSD != a.Billing.Cost(providers.MeterDeviceMS, 1501) || u[0].SettledAt != nil {
			t.Fatalf("provider_a's %s: %+v", op.Kind, u)
		}
	}
	if u := pooled.Usage; len(u) != 1 || u[0].Meter != providers.MeterTrainTokens || u[0].Quantity != 1000 || u[0].SettlementStatus != providers.Settled || u[0].CostMicroUSD != 1000 {
		t.Fatalf("provider_b's: %+v", u)
	}
	ceiling := int64(1_000_000)
	err = st.Update(func(tx persistence.Tx) error {
		if err := tx.Put(persistence.Sessions, []byte(ss.ID), &ss); err != nil {
			return err
		}
		if _, err := ledger.Open(tx, tenant, ss.ID, true, &ceiling, now); err != nil {
			return err
		}
		for _, w := range []struct {
			owner string
			op    *persistence.Operation
		}{{"wtr_1", &trained}, {"wtsm_1", &sampled}} {
			if err := ledger.Charge(tx, w.op, now); err != nil {
				return err
			}
			if err := tx.Put(persistence.Ops, persistence.SeqKey(w.owner, 1), w.op); err != nil {
				return err
			}
			if err := MarkDue(tx, w.owner, w.op, time.Minute); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := CostOf(st, tenant, ss.ID)
	if err != nil || c.TotalMicroUSD != CostPending || c.SettlementStatus != providers.Pending || len(c.Components) != 2 {
		t.Fatalf("cost before settlement: %+v %v", c, err)
	}
	if _, err := CostOf(st, persistence.Tenant{Org: "other"}, ss.ID); err == nil {
		t.Fatal("another organization read the cost")
	}
	if n, err := SettleDue(st, now.Add(time.Minute-time.Nanosecond)); n != 0 || err != nil {
		t.Fatalf("settled %d before they were due: %v", n, err)
	}
	if n, err := SettleDue(st, now.Add(time.Minute)); n != 2 || err != nil {
		t.Fatalf("settled %d of 2 when due: %v", n, err)
	}
	if n, err := SettleDue(st, now.Add(time.Hour)); n != 0 || err != nil {
		t.Fatalf("settled %d again: %v", n, err)
	}
	c, err = CostOf(st, tenant, ss.ID)
	if err != nil || c.TotalMicroUSD != c.EstimatedMaxMicroUSD || c.SettlementStatus != providers.Settled || c.TotalMicroUSD != 2*a.Billing.Cost(providers.MeterDeviceMS, 1501) {
		t.Fatalf("cost once settled: %+v %v", c, err)
	}
	err = st.View(func(tx persistence.Tx) error {
		bg, err := ledger.BudgetOf(tx, ss.ID)
		if err == nil && (bg.Pending != 0 || bg.Settled != c.TotalMicroUSD) {
			t.Errorf("budget after settlement: %+v", *bg)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A grain's prices are its session's billing snapshot, whatever the list
// says now, read once.
func TestPricesFromTheSnapshot(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tenant := persistence.Tenant{Org: "acme"}
	snap := providers.Billing{Currency: "USD", PerMillion: map[string]int64{providers.MeterDeviceMS: 42}}
	raw, _ := json.Marshal(map[string]any{"billing_snapshot": snap})
	ss := persistence.Session{ID: "wts_1", Tenant: tenant, Provider: providers.A, CapabilitySnapshot: raw}
	if err := st.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Sessions, []byte(ss.ID), &ss) }); err != nil {
		t.Fatal(err)
	}
	var cached *Prices
	if _, err := PricesOf(st, &cached, persistence.Tenant{Org: "other"}, ss.ID); err == nil || cached != nil {
		t.Fatalf("another organization's session priced: %v", err)
	}
	p, err := PricesOf(st, &cached, tenant, ss.ID)
	if err != nil || p.Provider != providers.A || p.Billing.PerMillion[providers.MeterDeviceMS] != 42 || cached != p {
		t.Fatalf("prices: %+v %v", p, err)
	}
	st.Close()
	if again, err := PricesOf(st, &cached, tenant, ss.ID); err != nil || again != p {
		t.Fatalf("the second read went to the store: %v", err)
	}
}
