package cluster

import (
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
)

// Placement is the cluster's identity lookup (a protoactor IdentityLookup):
// each grain lives on the member that weighted rendezvous hashing picks
// among the members that host its kind (Owner). Every member computes the
// same owner from the same topology, with no directory to keep; a member
// weighs as its announced capacity, so a node with more devices hosts
// proportionally more runs and samplers (and their trainers and sampling
// executors, which sit beside them); a member that joins or leaves moves
// only the grains that now hash to it or did.
type Placement struct {
	// Weight is a member's weight, by member id (nil: every member 1). It
	// must not change while the member is up: members that disagreed about
	// it would place grains differently.
	Weight func(id string) float64
	// Avoid lists, by kind, the kinds whose members a grain of that kind
	// keeps off while some member hosting it does not host them (samplers
	// off the members that train, when there are members for samplers
	// alone).
	Avoid map[string][]string

	c         *pcluster.Cluster
	activator *actor.PID
	sub       *eventstream.Subscription
	mu        sync.RWMutex
	members   []*pcluster.Member
}

// activatorName is the actor on every member that activates the grains
// placed there.
const activatorName = "wts-placement"

// activationWait bounds one activation request to the owner.
const activationWait = 5 * time.Second

// Setup starts the member's activator and follows the topology.
func (p *Placement) Setup(c *pcluster.Cluster, _ []string, _ bool) {
	p.c = c
	a := &activator{p: p, grains: map[string]activation{}}
	p.activator, _ = c.ActorSystem.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), activatorName)
	p.sub = c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pcluster.ClusterTopology); ok {
			p.mu.Lock()
			p.members = t.Members
			p.mu.Unlock()
			c.ActorSystem.Root.Send(p.activator, t)
		}
	})
}

// Shutdown stops following the topology and passivates the grains here.
func (p *Placement) Shutdown() {
	p.c.ActorSystem.EventStream.Unsubscribe(p.sub)
	if err := p.c.ActorSystem.Root.PoisonFuture(p.activator).Wait(); err != nil {
		p.c.Logger().Error("stop the placement activator", slog.Any("error", err))
	}
}

// Get returns the grain's activation, asking its owner to activate it if
// needed (nil when no member hosts its kind or the owner did not answer).
func (p *Placement) Get(id *pcluster.ClusterIdentity) *actor.PID {
	p.mu.RLock()
	owner := Owner(p.members, id.Kind, id.Identity, p.weight, p.Avoid)
	p.mu.RUnlock()
	if owner == nil {
		return nil
	}
	res, err := p.c.ActorSystem.Root.RequestFuture(actor.NewPID(owner.Address(), activatorName),
		&pcluster.ActivationRequest{ClusterIdentity: id}, activationWait).Result()
	if err != nil {
		return nil
	}
	if r, ok := res.(*pcluster.ActivationResponse); ok {
		return r.Pid
	}
	return nil
}

// RemovePid is protoactor's word that an activation is gone; the router
// drops it from the PID cache itself when a call finds it gone.
func (p *Placement) RemovePid(*pcluster.ClusterIdentity, *actor.PID) {}

func (p *Placement) weight(m *pcluster.Member) float64 {
	if p.Weight == nil {
		return 1
	}
	return p.Weight(m.Id)
}

// Owner is the member that hosts kind's grain identity: among the members
// hosting kind (those that avoid none of avoid[kind], if any of them do),
// the one with the highest weighted rendezvous score, w / -ln(u) for u
// the member's and the grain's hash in (0, 1). Each member then owns a
// share of the grains proportional to its weight. nil when no member hosts
// kind.
func Owner(members []*pcluster.Member, kind, identity string, weight func(*pcluster.Member) float64, avoid map[string][]string) *pcluster.Member {
	candidates := make([]*pcluster.Member, 0, len(members))
	apart := make([]*pcluster.Member, 0, len(members))
	for _, m := range members {
		if !m.HasKind(kind) {
			continue
		}
		candidates = append(candidates, m)
		if !slices.ContainsFunc(avoid[kind], m.HasKind) {
			apart = append(apart, m)
		}
	}
	if len(apart) > 0 {
		candidates = apart
	}
	var best *pcluster.Member
	top := math.Inf(-1)
	for _, m := range candidates {
		w := weight(m)
		if w <= 0 {
			w = 1
		}
		if s := w / -math.Log(unit(m.Address(), kind, identity)); s > top || s == top && m.Address() < best.Address() {
			best, top = m, s
		}
	}
	return best
}

// unit hashes a member and a grain to a number in (0, 1), the same on
// every member.
func unit(addr, kind, identity string) float64 {
	h := fnv.New64a()
	h.Write([]byte(addr))
	h.Write([]byte{0})
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(identity))
	x := h.Sum64()
	// splitmix64's finalizer: FNV's low bits are poorly mixed for keys
	// that differ only at the end.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return (float64(x>>11) + 0.5) / (1 << 53)
}

// activation is a grain activated on this member.
type activation struct {
	id  *pcluster.ClusterIdentity
	pid *actor.PID
}

// activator activates the grains placed on its member, one per identity,
// and passivates those that the topology places elsewhere after a change.
type activator struct {
	p      *Placement
	grains map[string]activation // by kind/identity
}

func (a *activator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pcluster.ActivationRequest:
		key := m.ClusterIdentity.AsKey()
		if g, ok := a.grains[key]; ok {
			ctx.Respond(&pcluster.ActivationResponse{Pid: g.pid})
			return
		}
		kind := a.p.c.GetClusterKind(m.ClusterIdentity.Kind)
		if kind == nil {
			ctx.Respond(&pcluster.ActivationResponse{Failed: true})
			return
		}
		pid := ctx.SpawnPrefix(pcluster.WithClusterIdentity(kind.Props, m.ClusterIdentity), m.ClusterIdentity.Identity)
		kind.Inc()
		a.grains[key] = activation{m.ClusterIdentity, pid}
		ctx.Respond(&pcluster.ActivationResponse{Pid: pid})
	case *actor.Terminated:
		for key, g := range a.grains {
			if g.pid.Equal(m.Who) {
				delete(a.grains, key)
				if kind := a.p.c.GetClusterKind(g.id.Kind); kind != nil {
					kind.Dec()
				}
				break
			}
		}
	case *pcluster.ClusterTopology:
		self := a.p.c.ActorSystem.Address()
		for _, g := range a.grains {
			if o := Owner(m.Members, g.id.Kind, g.id.Identity, a.p.weight, a.p.Avoid); o == nil || o.Address() != self {
				ctx.Poison(g.pid) // placed elsewhere now: it passivates, its state is in the store
			}
		}
	case *actor.Stopping:
		for _, g := range a.grains {
			if err := ctx.PoisonFuture(g.pid).Wait(); err != nil {
				ctx.Logger().Error("passivate a grain", slog.String("grain", g.id.AsKey()), slog.Any("error", err))
			}
		}
	}
}
