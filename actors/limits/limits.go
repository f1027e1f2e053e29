// Package limits bounds what a node takes on, so that no flood of
// submissions and no tenant can grow its backlog, its memory or its share
// without end: the queue limits an ordered operation is admitted under, and
// the count of each organization's live sessions and runs.
package limits

import (
	"fmt"
	"sync"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/persistence"
)

// Limits are the bounds. A submission past a queue limit is refused with
// 429 queue_full (and Retry-After): nothing of it is written.
// docs/operations.md lists them with their flags.
type Limits struct {
	// RunQueue bounds the operations of one run (or sampler) that are
	// queued or executing.
	RunQueue int
	// OrgQueue bounds them across an organization's runs and samplers on
	// this node, NodeQueue across the node.
	OrgQueue, NodeQueue int
	// QueueBytes bounds the memory the node holds for queued operations'
	// records (their payloads, as the grains keep them), node-wide.
	QueueBytes int64
	// OrgSessions bounds an organization's live sessions (not closed, timed
	// out or failed), OrgRuns its live runs (not in a terminal state).
	OrgSessions, OrgRuns int
}

// Default suits one node with a few dozen active tenants.
func Default() Limits {
	return Limits{RunQueue: 1000, OrgQueue: 5000, NodeQueue: 20000, QueueBytes: 512 << 20, OrgSessions: 100, OrgRuns: 100}
}

// Codes of admission control.
const (
	CodeQueueFull     = "queue_full"
	CodeLimitExceeded = "limit_exceeded"
)

// Live is what an organization's live count is of.
type Live string

// What is counted live.
const (
	Sessions Live = "session"
	Runs     Live = "run"
)

// Counter counts what the queue limits bound: each grain's queued
// operations and the bytes its memos hold for them (as the grain last
// reported them, after each message it handled); it checks the live limits
// against the counts in the store (Open).
type Counter struct {
	lim    Limits
	mu     sync.Mutex
	grains map[string]Load // grain id → its load
	orgs   map[string]Load
	node   Load
}

// Load is a grain's, an organization's or the node's queued operations
// and their bytes.
type Load struct {
	org   string
	Ops   int
	Bytes int64
}

// New is a counter of nothing yet under lim.
func New(lim Limits) *Counter {
	return &Counter{lim: lim, grains: map[string]Load{}, orgs: map[string]Load{}}
}

func refuse(code, format string, args ...any) *grain.Error {
	return &grain.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Set records a grain's load, replacing what it reported before.
func (a *Counter) Set(id, org string, ops int, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.grains[id]
	if old.Ops == ops && old.Bytes == bytes {
		return
	}
	o := a.orgs[org]
	o.Ops += ops - old.Ops
	o.Bytes += bytes - old.Bytes
	a.node.Ops += ops - old.Ops
	a.node.Bytes += bytes - old.Bytes
	if o.Ops == 0 && o.Bytes == 0 {
		delete(a.orgs, org)
	} else {
		a.orgs[org] = o
	}
	if ops == 0 && bytes == 0 {
		delete(a.grains, id)
	} else {
		a.grains[id] = Load{org, ops, bytes}
	}
}

// Admit refuses one more operation for a grain of org (a "run" or a
// "sampler": what) that has ops queued when a queue limit is reached.
func (a *Counter) Admit(org, what string, ops int) error {
	if ops >= a.lim.RunQueue {
		return refuse(CodeQueueFull, "the %s has %d operations queued, its limit; retry once some have run", what, ops)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.orgs[org].Ops >= a.lim.OrgQueue:
		return refuse(CodeQueueFull, "the organization has %d operations queued on this node, its limit; retry once some have run", a.orgs[org].Ops)
	case a.node.Ops >= a.lim.NodeQueue:
		return refuse(CodeQueueFull, "the node has %d operations queued, its limit; retry later", a.node.Ops)
	case a.node.Bytes >= a.lim.QueueBytes:
		return refuse(CodeQueueFull, "the node holds %d MiB of queued operations, its limit; retry later", a.node.Bytes>>20)
	}
	return nil
}

// Count is an organization's live sessions and runs, as the store holds
// them (bucket persistence.Live): written in the transaction that creates
// or ends one, so it is exact across the nodes of a cluster.
type Count struct {
	Sessions int `msgpack:"s"`
	Runs     int `msgpack:"r"`
}

func (c *Count) of(what Live) *int {
	if what == Runs {
		return &c.Runs
	}
	return &c.Sessions
}

// Open counts a new live session or run of org inside tx, refusing it at
// the limit. A transaction that runs again reads the count again.
func (a *Counter) Open(tx persistence.Tx, org string, what Live) error {
	limit := a.lim.OrgSessions
	if what == Runs {
		limit = a.lim.OrgRuns
	}
	return change(tx, org, what, func(n *int) error {
		if *n >= limit {
			return refuse(CodeLimitExceeded, "the organization has %d live %ss, its limit; close one first", *n, what)
		}
		*n++
		return nil
	})
}

// Close counts, inside tx, a live session or run of org that ends there.
func Close(tx persistence.Tx, org string, what Live) error {
	return change(tx, org, what, func(n *int) error {
		*n = max(*n-1, 0)
		return nil
	})
}

// change applies fn to org's count of what inside tx, and stores it.
func change(tx persistence.Tx, org string, what Live, fn func(n *int) error) error {
	var c Count
	if _, err := tx.Get(persistence.Live, []byte(org), &c); err != nil {
		return err
	}
	if err := fn(c.of(what)); err != nil {
		return err
	}
	return tx.Put(persistence.Live, []byte(org), &c)
}

// countedKey marks a store whose live counts are kept (Recount).
var countedKey = []byte("\x00counted")

// Recount sets every organization's count from what is live in the store
// (found: live sessions and runs by organization), once: a store from
// before the counts were kept. It is done inside one transaction, which
// finds the marker if another node recounted first.
func Recount(st persistence.Store, found func(tx persistence.Tx) (map[string]*Count, error)) error {
	return st.Update(func(tx persistence.Tx) error {
		var done bool
		if ok, err := tx.Get(persistence.Live, countedKey, &done); err != nil || ok {
			return err
		}
		counts, err := found(tx)
		if err != nil {
			return err
		}
		for org, c := range counts {
			if err := tx.Put(persistence.Live, []byte(org), c); err != nil {
				return err
			}
		}
		return tx.Put(persistence.Live, countedKey, true)
	})
}

// Queued is the node's load.
func (a *Counter) Queued() Load {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}
