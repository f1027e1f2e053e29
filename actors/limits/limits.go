// Package limits bounds what a node takes on, so that no flood of
// submissions and no tenant can grow its backlog, its memory or its share
// without end: the queue limits an ordered operation is admitted under, and
// the count of each organization's live sessions and runs.
package limits

import (
	"fmt"
	"sync"

	"github.com/wts-project/wts/actors/grain"
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

// Counter counts what the limits bound: each grain's queued operations and
// the bytes its memos hold for them (as the grain last reported them, after
// each message it handled), and each organization's live sessions and runs.
type Counter struct {
	lim    Limits
	mu     sync.Mutex
	grains map[string]Load // grain id → its load
	orgs   map[string]Load
	node   Load
	live   map[liveKey]int
}

// Load is a grain's, an organization's or the node's queued operations
// and their bytes.
type Load struct {
	org   string
	Ops   int
	Bytes int64
}

// liveKey counts an organization's live sessions or runs.
type liveKey struct {
	org  string
	what Live
}

// New is a counter of nothing yet under lim.
func New(lim Limits) *Counter {
	return &Counter{lim: lim, grains: map[string]Load{}, orgs: map[string]Load{}, live: map[liveKey]int{}}
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

// Open counts a new live session or run of org, refusing it at the limit.
func (a *Counter) Open(org string, what Live) error {
	limit := a.lim.OrgSessions
	if what == Runs {
		limit = a.lim.OrgRuns
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := liveKey{org, what}
	if a.live[k] >= limit {
		return refuse(CodeLimitExceeded, "the organization has %d live %ss, its limit; close one first", a.live[k], what)
	}
	a.live[k]++
	return nil
}

// Found counts a live session or run of org that the node finds in its
// store when it starts: it was admitted before, so no limit refuses it.
func (a *Counter) Found(org string, what Live) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live[liveKey{org, what}]++
}

// Close counts a live session or run of org that ended (or was not made
// after all).
func (a *Counter) Close(org string, what Live) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := liveKey{org, what}
	if a.live[k]--; a.live[k] <= 0 {
		delete(a.live, k)
	}
}

// Queued is the node's load.
func (a *Counter) Queued() Load {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

// Claim is one live session or run that a store transaction may create:
// the transaction opens it (Open) and may run more than once (a store
// runs a writer again when another changed what it read), so it opens
// once whatever the runs; Keep then closes it unless the creation was
// stored.
type Claim struct {
	c    *Counter
	org  string
	what Live
	held bool
}

// Claim starts a claim on a live what of org.
func (a *Counter) Claim(org string, what Live) *Claim { return &Claim{c: a, org: org, what: what} }

// Open opens the claim's count, once, refusing it at the limit.
func (cl *Claim) Open() error {
	if cl.held {
		return nil
	}
	if err := cl.c.Open(cl.org, cl.what); err != nil {
		return err
	}
	cl.held = true
	return nil
}

// Keep ends the claim: the count stays when stored, and closes otherwise.
func (cl *Claim) Keep(stored bool) {
	if cl.held && !stored {
		cl.c.Close(cl.org, cl.what)
	}
	cl.held = false
}
