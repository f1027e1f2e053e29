// Package usage meters what a run's and a sampler's operations use, at the
// prices of their session's billing snapshot, and settles and sums it: the
// usage components each operation records with its outcome, a session's
// list of them, and its cost.
package usage

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// Prices is the provider and billing snapshot of a run's session: the
// prices the session was created under, whatever the list says now.
type Prices struct {
	Provider string
	Billing  providers.Billing
}

// PricesOf reads the price list of tenant t's session into *cached the
// first time (once per grain activation: the snapshot is immutable).
func PricesOf(st persistence.Store, cached **Prices, t persistence.Tenant, sessionID string) (*Prices, error) {
	if *cached != nil {
		return *cached, nil
	}
	ss, err := session(st, t, sessionID)
	if err != nil {
		return nil, err
	}
	var capability struct {
		Billing providers.Billing `json:"billing_snapshot"`
	}
	if err := json.Unmarshal(ss.CapabilitySnapshot, &capability); err != nil {
		return nil, fmt.Errorf("session %s billing snapshot: %w", ss.ID, err)
	}
	*cached = &Prices{ss.Provider, capability.Billing}
	return *cached, nil
}

// session reads tenant t's session id.
func session(st persistence.Store, t persistence.Tenant, id string) (*persistence.Session, error) {
	return protocol.Owned(st, "session", id, t, persistence.GetSession, func(s *persistence.Session) persistence.Tenant { return s.Tenant })
}

// Record sets the usage components of an executed operation, as its
// session's provider bills it: provider_a's pending until the settlement
// pass settles them (Settler), provider_b's settled when observed.
func Record(op *persistence.Operation, d *executor.Done, p *Prices, now time.Time) {
	op.Usage = nil
	for _, rd := range providers.Meter(p.Provider, executor.KindOf(op.Kind).Meter, d.Status == states.OpSucceeded, d.Tokens, int64(d.DurationMS+0.999)) {
		status, settledAt := providers.Settled, &now
		if providers.SettlesLater(p.Provider) {
			status, settledAt = providers.Pending, nil
		}
		u := persistence.Usage{
			Meter: rd.Meter, Quantity: rd.Quantity, Unit: p.Billing.Units[rd.Meter], UnitPrice: p.Billing.PerMillion[rd.Meter],
			CostMicroUSD: p.Billing.Cost(rd.Meter, rd.Quantity), SettlementStatus: status, SettledAt: settledAt, ObservedAt: now,
		}
		op.Usage = append(op.Usage, u)
	}
	capAtHold(op)
}

// capAtHold bills op at most the estimate its budget holds for it (none
// held: no bound): tokens are never more than the estimate counted, so
// what passes it is device time, whose component is cut to fit; its
// quantity stays what was measured.
func capAtHold(op *persistence.Operation) {
	if op.HoldMicroUSD <= 0 {
		return
	}
	var total int64
	for _, u := range op.Usage {
		total += u.CostMicroUSD
	}
	for i := range op.Usage {
		if u := &op.Usage[i]; total > op.HoldMicroUSD && u.Meter == providers.MeterDeviceMS {
			cut := min(total-op.HoldMicroUSD, u.CostMicroUSD)
			u.CostMicroUSD -= cut
			total -= cut
		}
	}
}

// List lists a session's usage components in operation order.
func List(st persistence.Store, t persistence.Tenant, sessionID string) ([]persistence.Usage, error) {
	ss, err := session(st, t, sessionID)
	if err != nil {
		return nil, err
	}
	items := []persistence.Usage{}
	if ss.RunID == "" {
		return items, nil
	}
	err = st.View(func(tx persistence.Tx) error {
		list := func(op *persistence.Operation) error {
			for _, u := range op.Usage {
				u.SessionID, u.RunID, u.OperationID, u.Provider = op.SessionID, op.RunID, op.ID, ss.Provider
				items = append(items, u)
			}
			return nil
		}
		if err := persistence.ScanOps(tx, ss.RunID, 0, list); err != nil {
			return err
		}
		return persistence.ScanOps(tx, protocol.SamplerID(ss.RunID), 0, list) // its sampler's, if it has one
	})
	return items, err
}

// CostPending is what total_microusd says while any component is pending:
// the spec's literal, rather than a total that could still change.
const CostPending = "cost_pending"

// Cost is a session's cost status.
type Cost struct {
	SessionID string
	// EstimatedMaxMicroUSD is every component (pending ones included:
	// settlement never bills above the list price) and the estimates its
	// queued and executing operations hold: the final total is at most
	// this, with the work admitted so far.
	EstimatedMaxMicroUSD int64
	SettlementStatus     string
	TotalMicroUSD        any // int64, or CostPending
	Components           []persistence.Usage
}

// CostOf sums a session's usage: a total once every component is settled,
// CostPending before.
func CostOf(st persistence.Store, t persistence.Tenant, sessionID string) (*Cost, error) {
	items, err := List(st, t, sessionID)
	if err != nil {
		return nil, err
	}
	var total int64
	status := providers.Settled // the sum's status, derived from its components'
	for _, u := range items {
		total += u.CostMicroUSD
		if u.SettlementStatus == providers.Pending {
			status = providers.Pending
		}
	}
	var held int64 // the estimates of its operations not yet ended
	err = st.View(func(tx persistence.Tx) error {
		b, err := ledger.BudgetOf(tx, sessionID)
		if b != nil {
			held = b.Held
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	c := &Cost{SessionID: sessionID, SettlementStatus: status, EstimatedMaxMicroUSD: total + held, TotalMicroUSD: total, Components: items}
	if status == providers.Pending {
		c.TotalMicroUSD = CostPending
	}
	return c, nil
}
