package actors

import "sync"

// Limits bound what a node takes on, so that no flood of submissions and no
// tenant can grow its backlog, its memory or its share without end. A
// submission past a queue limit is refused with 429 queue_full (and
// Retry-After): nothing of it is written. docs/operations.md lists them
// with their flags.
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

// DefaultLimits suit one node with a few dozen active tenants.
func DefaultLimits() Limits {
	return Limits{RunQueue: 1000, OrgQueue: 5000, NodeQueue: 20000, QueueBytes: 512 << 20, OrgSessions: 100, OrgRuns: 100}
}

// Codes of admission control.
const (
	CodeQueueFull     = "queue_full"
	CodeLimitExceeded = "limit_exceeded"
)

// admission counts what the limits bound: each grain's queued operations
// and the bytes its memos hold for them (as the grain last reported them,
// after each message it handled), and each organization's live sessions and
// runs.
type admission struct {
	lim    Limits
	mu     sync.Mutex
	grains map[string]queued // grain id → its load
	orgs   map[string]queued
	node   queued
	live   map[liveKey]int
}

// queued is a load: operations queued or executing, and their bytes.
type queued struct {
	org   string
	ops   int
	bytes int64
}

// liveKey counts an organization's live sessions or runs.
type liveKey struct{ org, what string }

func newAdmission(lim Limits) *admission {
	return &admission{lim: lim, grains: map[string]queued{}, orgs: map[string]queued{}, live: map[liveKey]int{}}
}

// set records a grain's load, replacing what it reported before.
func (a *admission) set(id, org string, ops int, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.grains[id]
	if old.ops == ops && old.bytes == bytes {
		return
	}
	o := a.orgs[org]
	o.ops += ops - old.ops
	o.bytes += bytes - old.bytes
	a.node.ops += ops - old.ops
	a.node.bytes += bytes - old.bytes
	if o.ops == 0 && o.bytes == 0 {
		delete(a.orgs, org)
	} else {
		a.orgs[org] = o
	}
	if ops == 0 && bytes == 0 {
		delete(a.grains, id)
	} else {
		a.grains[id] = queued{org, ops, bytes}
	}
}

// admit refuses one more operation for a grain of org that has ops queued
// when a queue limit is reached.
func (a *admission) admit(org, what string, ops int) error {
	if ops >= a.lim.RunQueue {
		return refuse(CodeQueueFull, "the %s has %d operations queued, its limit; retry once some have run", what, ops)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.orgs[org].ops >= a.lim.OrgQueue:
		return refuse(CodeQueueFull, "the organization has %d operations queued on this node, its limit; retry once some have run", a.orgs[org].ops)
	case a.node.ops >= a.lim.NodeQueue:
		return refuse(CodeQueueFull, "the node has %d operations queued, its limit; retry later", a.node.ops)
	case a.node.bytes >= a.lim.QueueBytes:
		return refuse(CodeQueueFull, "the node holds %d MiB of queued operations, its limit; retry later", a.node.bytes>>20)
	}
	return nil
}

// open counts a new live session or run of org, refusing it at the limit.
func (a *admission) open(org, what string) error {
	limit := a.lim.OrgSessions
	if what == runKind {
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

// close counts a live session or run of org that ended (or was not made
// after all).
func (a *admission) close(org, what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := liveKey{org, what}
	if a.live[k]--; a.live[k] <= 0 {
		delete(a.live, k)
	}
}

// queued is the node's load.
func (a *admission) queued() queued {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}
