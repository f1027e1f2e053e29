package usage

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// Pending components are settled by a pass, as a provider's invoice would
// settle them: a component observed at t is settled at t + the node's
// settle-after delay. Each operation that ended with pending components
// has an entry in persistence.Unsettled, keyed by when it is due, so that
// a pass reads only what is due.

// dueKey is the key of owner's operation seq, due at: the time first
// (big-endian Unix nanoseconds, so that keys sort by it), then the owner's
// SeqKey.
func dueKey(at time.Time, owner string, seq int64) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(at.UnixNano())), persistence.SeqKey(owner, seq)...)
}

// MarkDue records, inside the write that ends op (of owner, a run or a
// sampler), that its pending components are due for settlement after
// delay; an operation without any records nothing.
func MarkDue(tx persistence.Tx, owner string, op *persistence.Operation, delay time.Duration) error {
	for _, u := range op.Usage {
		if u.SettlementStatus == providers.Pending {
			return tx.Put(persistence.Unsettled, dueKey(u.ObservedAt.Add(delay), owner, op.SeqID), op.SessionID)
		}
	}
	return nil
}

// settleBatch bounds the operations one settlement transaction settles.
const settleBatch = 256

// SettleDue settles the pending components of operations due by now, a
// transaction a batch, and reports how many operations it settled. Each
// due entry is deleted in the transaction that settles its operation, so
// that passes of several nodes settle each once.
func SettleDue(st persistence.Store, now time.Time) (int, error) {
	settled := 0
	for {
		var keys [][]byte
		err := st.View(func(tx persistence.Tx) error {
			return tx.Scan(persistence.Unsettled, nil, nil, func(k, _ []byte) (bool, error) {
				if int64(binary.BigEndian.Uint64(k)) > now.UnixNano() {
					return false, nil
				}
				keys = append(keys, k)
				return len(keys) < settleBatch, nil
			})
		})
		if err != nil || len(keys) == 0 {
			return settled, err
		}
		n := 0
		err = st.Update(func(tx persistence.Tx) error {
			n = 0
			bySession := map[string]int64{}
			for _, k := range keys {
				var sessionID string
				if ok, err := tx.Get(persistence.Unsettled, k, &sessionID); err != nil || !ok {
					if err != nil {
						return err
					}
					continue // another node's pass settled it
				}
				amount, err := settleOp(tx, k[8:], now)
				if err != nil {
					return err
				}
				bySession[sessionID] += amount
				n++
				if err := tx.Delete(persistence.Unsettled, k); err != nil {
					return err
				}
			}
			for id, amount := range bySession {
				if err := ledger.SettlePending(tx, id, amount, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return settled, err
		}
		settled += n
		if len(keys) < settleBatch {
			return settled, nil
		}
	}
}

// settleOp settles the pending components of the operation at seqKey and
// returns their cost.
func settleOp(tx persistence.Tx, seqKey []byte, now time.Time) (int64, error) {
	var op persistence.Operation
	if ok, err := tx.Get(persistence.Ops, seqKey, &op); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("settle: operation %x not found", seqKey)
		}
		return 0, err
	}
	var amount int64
	for i := range op.Usage {
		if u := &op.Usage[i]; u.SettlementStatus == providers.Pending {
			if err := states.Move(states.SettlementMoves, &u.SettlementStatus, providers.Settled); err != nil {
				return 0, err
			}
			u.SettledAt = &now
			amount += u.CostMicroUSD
		}
	}
	return amount, tx.Put(persistence.Ops, seqKey, &op)
}

// Settler runs the settlement pass every interval until stop closes.
func Settler(st persistence.Store, clock func() time.Time, interval time.Duration, log func(err error), stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if _, err := SettleDue(st, clock().UTC()); err != nil {
			log(err)
		}
	}
}
