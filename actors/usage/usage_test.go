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
)

// provider_a's device time on a run's trainer stays pending until the run
// ends and Settle settles it; its tokens, and a sampler's device time,
// settle when observed. A session's cost is "cost_pending" until then.
func TestPendingUntilTheRunEnds(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tenant := persistence.Tenant{Org: "acme"}
	ss := persistence.Session{ID: "wts_1", Tenant: tenant, Provider: providers.A, RunID: "wtr_1", Status: states.SessionReady}
	prices := &Prices{providers.A, providers.PriceList(providers.A)}
	done := &executor.Done{Status: states.OpSucceeded, Tokens: 1000, DurationMS: 1500.2}
	trained := persistence.Operation{ID: "wto_1", RunID: "wtr_1", SeqID: 1, Kind: payload.ForwardBackward}
	Record(&trained, done, prices, now, true)
	sampled := persistence.Operation{ID: "wto_2", RunID: "wtr_1", SeqID: 1, Kind: payload.Sample}
	Record(&sampled, done, prices, now, false)
	if len(trained.Usage) != 2 || len(sampled.Usage) != 2 {
		t.Fatalf("components: %+v / %+v", trained.Usage, sampled.Usage)
	}
	for _, u := range trained.Usage {
		want := providers.Settled
		if u.Meter == providers.MeterDeviceMS {
			want = providers.Pending
			if u.Quantity != 1501 {
				t.Errorf("device time %d ms, want 1501 (rounded up)", u.Quantity)
			}
		}
		if u.SettlementStatus != want || u.CostMicroUSD != prices.Billing.Cost(u.Meter, u.Quantity) {
			t.Errorf("trainer's %s: %s at %d", u.Meter, u.SettlementStatus, u.CostMicroUSD)
		}
	}
	for _, u := range sampled.Usage {
		if u.SettlementStatus != providers.Settled {
			t.Errorf("sampler's %s: %s", u.Meter, u.SettlementStatus)
		}
	}
	err = st.Update(func(tx persistence.Tx) error {
		if err := tx.Put(persistence.Sessions, []byte(ss.ID), &ss); err != nil {
			return err
		}
		if err := tx.Put(persistence.Ops, persistence.SeqKey("wtr_1", 1), &trained); err != nil {
			return err
		}
		return tx.Put(persistence.Ops, persistence.SeqKey("wtsm_1", 1), &sampled)
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := CostOf(st, tenant, ss.ID)
	if err != nil || c.TotalMicroUSD != CostPending || c.SettlementStatus != providers.Pending || len(c.Components) != 4 {
		t.Fatalf("cost while the run lives: %+v %v", c, err)
	}
	if _, err := CostOf(st, persistence.Tenant{Org: "other"}, ss.ID); err == nil {
		t.Fatal("another organization read the cost")
	}
	if err := st.Update(func(tx persistence.Tx) error { return Settle(tx, "wtr_1", ss.ID, now) }); err != nil {
		t.Fatal(err)
	}
	c, err = CostOf(st, tenant, ss.ID)
	if err != nil || c.TotalMicroUSD != c.EstimatedMaxMicroUSD || c.SettlementStatus != providers.Settled {
		t.Fatalf("cost once the run ended: %+v %v", c, err)
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
