package actors

import (
	"fmt"
	"math"
	"time"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/slots"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// Reads go straight to the store: it holds only committed state, which is
// exactly what a caller may see, and polling never queues behind a grain.

// GetSession reads a session with its lease.
func (s *System) GetSession(t persistence.Tenant, id string) (*protocol.Session, error) {
	return protocol.Owned(s.n.Store, "session", id, t, readSession, func(v *protocol.Session) persistence.Tenant { return v.Tenant })
}

// readSession reads session id with its lease into v.
func readSession(tx persistence.Tx, id string, v *protocol.Session) (bool, error) {
	ok, err := tx.Get(persistence.Sessions, []byte(id), &v.Session)
	if !ok || err != nil {
		return ok, err
	}
	l, err := lease.Get(tx, id)
	if err == nil {
		*v = *protocol.SessionView(&v.Session, l)
	}
	return true, err
}

// Listing is a page of a tenant's sessions or runs, newest first.
// NextAfter is the cursor of the next page: the last item's id, or the
// cursor asked with for an empty page.
type Listing[T any] struct {
	Items     []T
	NextAfter string
}

// ListSessions pages tenant t's sessions, newest first, from after the
// session after ("": from the newest).
func (s *System) ListSessions(t persistence.Tenant, after string, limit int) (*Listing[protocol.Session], error) {
	return listing(s, t, "session", after, limit, readSession, func(v *protocol.Session) (persistence.Tenant, time.Time) { return v.Tenant, v.CreatedAt })
}

// ListRuns pages tenant t's runs, newest first, from after the run after
// ("": from the newest).
func (s *System) ListRuns(t persistence.Tenant, after string, limit int) (*Listing[persistence.Run], error) {
	return listing(s, t, "run", after, limit, persistence.GetRun, func(v *persistence.Run) (persistence.Tenant, time.Time) { return v.Tenant, v.CreatedAt })
}

// listing reads a page of tenant t's records of kind (persistence.Listing)
// with read; the cursor after must name one of t's.
func listing[T any](s *System, t persistence.Tenant, kind, after string, limit int, read func(persistence.Tx, string, *T) (bool, error),
	owner func(*T) (persistence.Tenant, time.Time)) (*Listing[T], error) {
	out := &Listing[T]{Items: []T{}, NextAfter: after}
	err := s.n.Store.View(func(tx persistence.Tx) error {
		var from []byte
		if after != "" {
			var v T
			ok, err := read(tx, after, &v)
			if err != nil {
				return err
			}
			tenant, created := owner(&v)
			if !ok || tenant != t {
				return protocol.NotFound(kind, after)
			}
			from = persistence.ListedKey(t, kind, created, after)
		}
		ids, err := persistence.Listing(tx, t, kind, from, limit)
		if err != nil {
			return err
		}
		for _, id := range ids {
			var v T
			if ok, err := read(tx, id, &v); err != nil || !ok {
				return fmt.Errorf("listed %s %s: found %v: %w", kind, id, ok, err)
			}
			out.Items, out.NextAfter = append(out.Items, v), id
		}
		return nil
	})
	return out, err
}

// GetRun reads a run.
func (s *System) GetRun(t persistence.Tenant, id string) (*persistence.Run, error) {
	return protocol.Owned(s.n.Store, "run", id, t, persistence.GetRun, func(v *persistence.Run) persistence.Tenant { return v.Tenant })
}

// GetOperation reads an operation by id alone.
func (s *System) GetOperation(t persistence.Tenant, id string) (*persistence.Operation, error) {
	var op persistence.Operation
	var found bool
	var owner persistence.Tenant
	err := s.n.Store.View(func(tx persistence.Tx) error {
		var key []byte
		if ok, err := tx.Get(persistence.Index, []byte(id), &key); err != nil || !ok {
			return err
		}
		if _, err := tx.Get(persistence.Ops, key, &op); err != nil {
			return err
		}
		var r persistence.Run
		found = true
		_, err := tx.Get(persistence.Runs, []byte(op.RunID), &r)
		owner = r.Tenant
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found || owner != t {
		return nil, protocol.NotFound("operation", id)
	}
	op.Payload = nil
	return &op, nil
}

// GetSampler reads a sampler.
func (s *System) GetSampler(t persistence.Tenant, id string) (*persistence.Sampler, error) {
	read := func(tx persistence.Tx, id string, v *persistence.Sampler) (bool, error) {
		ok, err := tx.Get(persistence.Samplers, []byte(id), v)
		if ok && err == nil {
			var h persistence.Head
			_, err = tx.Get(persistence.Heads, []byte(id), &h)
			v.NextSeqID = h.NextSeqID
		}
		return ok, err
	}
	return protocol.Owned(s.n.Store, "sampler", id, t, read, func(v *persistence.Sampler) persistence.Tenant { return v.Tenant })
}

// GetCheckpoint reads a checkpoint of tenant t.
func (s *System) GetCheckpoint(t persistence.Tenant, id string) (*persistence.Checkpoint, error) {
	return artifacts.GetCheckpoint(s.n.Store, t, id)
}

// GetArtifact reads an artifact of tenant t.
func (s *System) GetArtifact(t persistence.Tenant, id string) (*persistence.Artifact, error) {
	return artifacts.GetArtifact(s.n.Store, t, id)
}

// Page is one page of a run's sequence-keyed records.
type Page[T any] struct {
	Items        []T
	NextAfterSeq int64
}

// page reads up to limit records of a run from bucket b with seq > after.
func page[T any](s *System, t persistence.Tenant, b persistence.Bucket, runID string, after int64, limit int, seqOf func(*T) int64) (*Page[T], error) {
	if _, err := s.GetRun(t, runID); err != nil {
		return nil, err
	}
	return seqPage(s, b, runID, after, limit, seqOf)
}

// seqPage reads up to limit records of owner (a run or a sampler) from
// bucket b with seq > after; the caller has checked the owner is the
// caller's.
func seqPage[T any](s *System, b persistence.Bucket, runID string, after int64, limit int, seqOf func(*T) int64) (*Page[T], error) {
	p := &Page[T]{Items: []T{}, NextAfterSeq: after}
	err := s.n.Store.View(func(tx persistence.Tx) error {
		return persistence.Each(tx, b, []byte(runID), persistence.SeqKey(runID, after), func(_ []byte, v *T) (bool, error) {
			p.Items = append(p.Items, *v)
			p.NextAfterSeq = seqOf(v)
			return len(p.Items) < limit, nil
		})
	})
	return p, err
}

// ListOperations pages a run's operations in seq_id order.
func (s *System) ListOperations(t persistence.Tenant, runID string, after int64, limit int) (*Page[persistence.Operation], error) {
	return handles(page(s, t, persistence.Ops, runID, after, limit, opSeq))
}

// ListSamplerOperations pages a sampler's operations in seq_id order.
func (s *System) ListSamplerOperations(t persistence.Tenant, samplerID string, after int64, limit int) (*Page[persistence.Operation], error) {
	if _, err := s.GetSampler(t, samplerID); err != nil {
		return nil, err
	}
	return handles(seqPage(s, persistence.Ops, samplerID, after, limit, opSeq))
}

// ListCheckpoints pages a run's checkpoints in the order they were saved.
func (s *System) ListCheckpoints(t persistence.Tenant, runID string, after int64, limit int) (*Page[persistence.Checkpoint], error) {
	return page(s, t, persistence.Checkpoints, runID, after, limit, func(c *persistence.Checkpoint) int64 { return c.SeqID })
}

// ListArtifacts pages a run's artifacts in the order they were exported.
func (s *System) ListArtifacts(t persistence.Tenant, runID string, after int64, limit int) (*Page[persistence.Artifact], error) {
	return page(s, t, persistence.Artifacts, runID, after, limit, func(a *persistence.Artifact) int64 { return a.SeqID })
}

func opSeq(o *persistence.Operation) int64 { return o.SeqID }

// handles drops the payloads of a page of operations (callers see handles).
func handles(p *Page[persistence.Operation], err error) (*Page[persistence.Operation], error) {
	if p != nil {
		for i := range p.Items {
			p.Items[i].Payload = nil
		}
	}
	return p, err
}

// Summary describes one metric over all of a run's step records.
type Summary struct {
	Last  float64 `json:"last"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	Count int     `json:"count"`
}

// Metrics pages a run's step records and summarises every metric over all of
// them (not only the page), in one pass over the records.
func (s *System) Metrics(t persistence.Tenant, runID string, after int64, limit int) (*MetricsPage, error) {
	all, err := page(s, t, persistence.Metrics, runID, 0, math.MaxInt, func(m *persistence.Metric) int64 { return m.SeqID })
	if err != nil {
		return nil, err
	}
	p := &MetricsPage{Page: Page[persistence.Metric]{Items: []persistence.Metric{}, NextAfterSeq: after}, Summary: map[string]Summary{}}
	sum := p.Summary
	for _, m := range all.Items {
		if m.SeqID > after && len(p.Items) < limit {
			p.Items = append(p.Items, m)
			p.NextAfterSeq = m.SeqID
		}
		for k, v := range m.Values {
			x, seen := sum[k]
			if !seen {
				x.Min, x.Max = v, v
			}
			x.Last, x.Min, x.Max = v, min(x.Min, v), max(x.Max, v)
			x.Mean += (v - x.Mean) / float64(x.Count+1)
			x.Count++
			sum[k] = x
		}
	}
	return p, nil
}

// MetricsPage is one page of step records and the summary of all of them.
type MetricsPage struct {
	Page[persistence.Metric]
	Summary map[string]Summary
}

// Offer is a provider's capability row and its room now.
type Offer struct {
	Row       *providers.Capability
	Available bool // a session may be routed to it now
	// FreeDedicated is how many dedicated trainers are free across the
	// cluster (provider_a; -1 for a provider without them).
	FreeDedicated int
}

// Offers lists the providers in the service's order, with their room now.
func (s *System) Offers() ([]Offer, error) {
	var out []Offer
	err := s.n.Store.View(func(tx persistence.Tx) error {
		out = out[:0]
		for _, p := range providers.Order {
			row := s.cfg.Registry.Row(p)
			if row == nil {
				continue
			}
			o := Offer{Row: row, Available: true, FreeDedicated: -1}
			if providers.Dedicated(p) {
				free, err := slots.Free(tx, s.n.Trainers())
				if err != nil {
					return err
				}
				o.FreeDedicated, o.Available = free, free > 0
			}
			out = append(out, o)
		}
		return nil
	})
	return out, err
}
