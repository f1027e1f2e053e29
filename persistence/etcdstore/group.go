package etcdstore

import (
	"cmp"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/wts-project/wts/persistence"
)

// maxTxnOps bounds a group's compares and its writes, each below the
// MaxTxnOps the servers are started with (Serve).
const maxTxnOps = 4096

// entry is a record as a transaction sees it: the bytes its readers get,
// and for a write what goes to etcd.
type entry struct {
	raw    []byte // nil: absent (deleted)
	stored []byte // a write's etcd value (blobs.store); nil for a delete
	mod    int64  // etcd's modification revision of what was read; 0 for a write
}

// span is a range a group scanned, at the revision it read.
type span struct {
	from, end string
	rev       int64
}

// group is one attempt at a group commit: its writers' changes, one after
// another, and what they read from etcd (or the cache), which the commit
// checks is still there.
type group struct {
	s      *Store
	reads  map[string]entry // by etcd key: first read from etcd or the cache
	ranges []span
	over   map[string]entry // the group's writes so far, by etcd key
	bytes  int
}

func newGroup(s *Store) *group {
	return &group{s: s, reads: map[string]entry{}, over: map[string]entry{}}
}

// full says whether the group has taken as much as one transaction holds.
func (g *group) full() bool {
	return g.bytes >= maxBatchBytes || len(g.reads)+len(g.ranges) >= maxTxnOps/2 || len(g.over) >= maxTxnOps/2
}

// run runs one writer's fn; its changes join the group only if it succeeds.
func (g *group) run(fn func(persistence.Tx) error) error {
	t := &tx{s: g.s, g: g, own: map[string]entry{}}
	if err := fn(t); err != nil || t.err != nil {
		return cmp.Or(t.err, err)
	}
	for k, e := range t.own {
		g.over[k] = e
		g.bytes += len(k) + len(e.stored)
	}
	return nil
}

// commit writes the group's changes if nothing it read has changed since,
// and reports whether it did. The cache then holds what was read and
// written.
func (g *group) commit() (bool, error) {
	if len(g.over) == 0 && len(g.reads) == 0 && len(g.ranges) == 0 {
		return true, nil
	}
	cmps := make([]clientv3.Cmp, 0, len(g.reads)+len(g.ranges))
	for k, e := range g.reads {
		if e.mod == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", e.mod))
		}
	}
	for _, sp := range g.ranges {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(sp.from), "<", sp.rev+1).WithRange(sp.end))
	}
	ops := make([]clientv3.Op, 0, len(g.over))
	for k, e := range g.over {
		if e.raw == nil {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(e.stored)))
		}
	}
	c, cancel := ctx()
	defer cancel()
	resp, err := g.s.cli.Txn(c).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("store commit: %w", err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	for k, e := range g.reads {
		g.s.cache.put(k, e.raw, e.mod)
	}
	for k, e := range g.over {
		mod := resp.Header.Revision
		if e.raw == nil {
			mod = 0 // absent, as a read finds it
		}
		g.s.cache.put(k, e.raw, mod)
	}
	return true, nil
}

// forgetAll drops what the group read or wrote from the cache: its
// commit's outcome is not known.
func (g *group) forgetAll() {
	g.forgetReads()
	for k := range g.over {
		g.s.cache.drop(k)
	}
}

// forgetReads drops what the group read from the cache: something of it
// has changed.
func (g *group) forgetReads() {
	for k := range g.reads {
		g.s.cache.drop(k)
	}
}
