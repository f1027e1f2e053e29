package cluster

import (
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/wts-project/wts/persistence"
)

// Placement is the cluster's identity lookup (a protoactor IdentityLookup):
// it says on which member each grain lives, among the members that host
// its kind.
//
// With a Directory (a cluster's shared store), a grain stays on the member
// it was placed on while that member is up, and a grain placed anew (new,
// or its member gone) goes to the freer of its two first members by
// weighted rendezvous hashing (Owner): the one with more capacity per grain
// it already holds, as members announce them. A member that joins takes
// new grains at once and moves none; trainers stay where they are. The
// record of the choice is written with a compare on what was read, so two
// members placing one grain at once agree.
//
// Without one (tests of the cluster alone), every grain lives on its first
// member by weighted rendezvous hashing, each member then owning a share
// proportional to its weight, and a grain whose first member changes with
// the member list passivates and moves.
type Placement struct {
	// Weight is a member's weight, by member id (nil: every member 1). It
	// must not change while the member is up.
	Weight func(id string) float64
	// Load is how many grains of a kind a member holds, by member id (nil:
	// none).
	Load func(id, kind string) int
	// Avoid lists, by kind, the kinds whose members a grain of that kind
	// keeps off while some member hosting it does not host them (samplers
	// off the members that train, when there are members for samplers
	// alone).
	Avoid map[string][]string
	// Directory, when set, records where each grain was placed.
	Directory persistence.Store
	// Needs, when set, is the base model a grain needs its member to serve
	// ("" none), read when the grain is placed; Serves says whether a
	// member (by id) serves a model. A grain is placed on a member that
	// serves what it needs, when one does.
	Needs  func(kind, identity string) (string, error)
	Serves func(id, model string) bool
	// Free, when set, is the memory free across a member's devices (by
	// member id), and whether it announced any: a grain goes to the
	// member with clearly more of it (freer).
	Free func(id string) (int64, bool)

	c         *pcluster.Cluster
	activator *actor.PID
	sub       *eventstream.Subscription
	mu        sync.RWMutex
	members   []*pcluster.Member
	leaving   sync.Map // ids of the PIDs of activations off the routes (Leave)
}

// placed is a grain's record in the directory.
type placed struct {
	Member string `msgpack:"m"` // the member's id
}

// activatorName is the actor on every member that activates the grains
// placed there.
const activatorName = "wts-placement"

// activationWait bounds one activation request to the owner.
const activationWait = 5 * time.Second

// Setup starts the member's activator and follows the topology.
func (p *Placement) Setup(c *pcluster.Cluster, _ []string, _ bool) {
	p.c = c
	a := &activator{p: p, grains: map[string]activation{}, byPID: map[string]activation{}}
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

// Get returns the grain's activation, asking its member to activate it if
// needed (nil when no member hosts its kind or the member did not answer).
func (p *Placement) Get(id *pcluster.ClusterIdentity) *actor.PID {
	p.mu.RLock()
	members := p.members
	p.mu.RUnlock()
	owner, err := p.owner(members, id.Kind, id.Identity)
	if err != nil {
		p.c.Logger().Error("place a grain", slog.String("grain", id.AsKey()), slog.Any("error", err))
		return nil
	}
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

// owner is the member that hosts the grain: its directory record's while
// that member is among members, else the freer of its two first members
// (recorded). nil when no member hosts kind.
func (p *Placement) owner(members []*pcluster.Member, kind, identity string) (*pcluster.Member, error) {
	ranked := Ranked(members, kind, identity, p.weight, p.Avoid)
	if p.Directory == nil || len(ranked) < 2 {
		if len(ranked) == 0 {
			return nil, nil
		}
		return ranked[0], nil
	}
	key := placementKey(kind, identity)
	find := func(tx persistence.Tx) (*pcluster.Member, error) {
		var rec placed
		if ok, err := tx.Get(persistence.Placements, key, &rec); err != nil || !ok {
			return nil, err
		}
		if i := slices.IndexFunc(ranked, func(m *pcluster.Member) bool { return m.Id == rec.Member }); i >= 0 {
			return ranked[i], nil
		}
		return nil, nil // its member is gone, or no longer hosts the kind
	}
	var at *pcluster.Member
	err := p.Directory.View(func(tx persistence.Tx) (err error) {
		at, err = find(tx)
		return err
	})
	if err != nil || at != nil {
		return at, err
	}
	if ranked, err = p.serving(ranked, kind, identity); err != nil {
		return nil, err
	}
	err = p.Directory.Update(func(tx persistence.Tx) (err error) {
		if at, err = find(tx); err != nil || at != nil {
			return err
		}
		at = ranked[0]
		if len(ranked) > 1 {
			at = p.freer(ranked[0], ranked[1], kind)
		}
		return tx.Put(persistence.Placements, key, &placed{Member: at.Id})
	})
	return at, err
}

func placementKey(kind, identity string) []byte { return []byte(kind + "/" + identity) }

// Pin records, inside tx, that grain kind/identity goes to member (a
// provider_a run, to the member of its session's dedicated trainer): it
// is placed there while that member is up and hosts the kind.
func Pin(tx persistence.Tx, kind, identity, member string) error {
	return tx.Put(persistence.Placements, placementKey(kind, identity), &placed{Member: member})
}

// Forget drops a grain's placement record inside tx, when the grain has
// ended (its run or session terminal, its sampler retired): the records do
// not pile up, and a grain called again after that is simply placed anew.
func Forget(tx persistence.Tx, kind, identity string) error {
	return tx.Delete(persistence.Placements, placementKey(kind, identity))
}

// serving keeps, of ranked, the members that serve the base model the
// grain needs; all of them if none does (its activation then says what is
// missing).
func (p *Placement) serving(ranked []*pcluster.Member, kind, identity string) ([]*pcluster.Member, error) {
	if p.Needs == nil || p.Serves == nil {
		return ranked, nil
	}
	model, err := p.Needs(kind, identity)
	if err != nil || model == "" {
		return ranked, err
	}
	serving := slices.DeleteFunc(slices.Clone(ranked), func(m *pcluster.Member) bool { return !p.Serves(m.Id, model) })
	if len(serving) == 0 {
		return ranked, nil
	}
	return serving, nil
}

// freer is whichever of a and b has more capacity for one more grain of
// kind: more free device memory, by more than a hundredth (what members
// announce moves in such steps); else its weight over the grains it holds,
// plus one; a on a tie.
func (p *Placement) freer(a, b *pcluster.Member, kind string) *pcluster.Member {
	if p.Free != nil {
		fa, okA := p.Free(a.Id)
		fb, okB := p.Free(b.Id)
		if okA && okB && abs(fa-fb) > max(fa, fb)/100 {
			if fb > fa {
				return b
			}
			return a
		}
	}
	free := func(m *pcluster.Member) float64 {
		load := 0
		if p.Load != nil {
			load = p.Load(m.Id, kind)
		}
		return p.weight(m) / float64(load+1)
	}
	if free(b) > free(a) {
		return b
	}
	return a
}

func (p *Placement) weight(m *pcluster.Member) float64 {
	if p.Weight == nil {
		return 1
	}
	return p.Weight(m.Id)
}

// Owner is the first member for kind's grain identity by weighted
// rendezvous hashing (Ranked); nil when no member hosts kind. Each member
// is first for a share of the grains proportional to its weight.
func Owner(members []*pcluster.Member, kind, identity string, weight func(*pcluster.Member) float64, avoid map[string][]string) *pcluster.Member {
	if r := Ranked(members, kind, identity, weight, avoid); len(r) > 0 {
		return r[0]
	}
	return nil
}

// Ranked orders the members that may host kind's grain identity (those
// hosting kind; of them, those that avoid none of avoid[kind], if any do)
// by their weighted rendezvous score, highest first: w / -ln(u), for u the
// member's and the grain's hash in (0, 1) and w the member's weight.
func Ranked(members []*pcluster.Member, kind, identity string, weight func(*pcluster.Member) float64, avoid map[string][]string) []*pcluster.Member {
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
	score := make(map[*pcluster.Member]float64, len(candidates))
	for _, m := range candidates {
		w := weight(m)
		if w <= 0 {
			w = 1
		}
		score[m] = w / -math.Log(unit(m.Address(), kind, identity))
	}
	slices.SortFunc(candidates, func(a, b *pcluster.Member) int {
		switch {
		case score[a] > score[b]:
			return -1
		case score[a] < score[b]:
			return 1
		}
		return strings.Compare(a.Address(), b.Address())
	})
	return candidates
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

// Leave takes pid, an activation of grain kind/identity on this member,
// off the routes before it stops: the calls that look for the grain from
// now on reach a new activation instead of this one, whose mailbox, once
// it stops, drops unanswered whatever is still in it (protoactor's). A
// grain leaves this way and stops a while after (grain.Base).
func Leave(c *pcluster.Cluster, kind, identity string, pid *actor.PID) {
	c.PidCache.RemoveByValue(identity, kind, pid)
	if p, ok := c.Config.IdentityLookup.(*Placement); ok {
		p.leaving.Store(pid.Id, true)
	}
}

// activator activates the grains placed on its member, one per identity,
// and passivates those that the topology places elsewhere after a change.
type activator struct {
	p      *Placement
	grains map[string]activation // the routed activation, by kind/identity
	byPID  map[string]activation // every live one (leaving ones too), by its PID's id
}

func (a *activator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pcluster.ActivationRequest:
		key := m.ClusterIdentity.AsKey()
		if g, ok := a.grains[key]; ok {
			if _, leaving := a.p.leaving.Load(g.pid.Id); !leaving {
				ctx.Respond(&pcluster.ActivationResponse{Pid: g.pid})
				return
			}
		}
		kind := a.p.c.GetClusterKind(m.ClusterIdentity.Kind)
		if kind == nil {
			ctx.Respond(&pcluster.ActivationResponse{Failed: true})
			return
		}
		pid := ctx.SpawnPrefix(pcluster.WithClusterIdentity(kind.Props, m.ClusterIdentity), m.ClusterIdentity.Identity)
		kind.Inc()
		a.grains[key], a.byPID[pid.Id] = activation{m.ClusterIdentity, pid}, activation{m.ClusterIdentity, pid}
		ctx.Respond(&pcluster.ActivationResponse{Pid: pid})
	case *actor.Terminated:
		g, ok := a.byPID[m.Who.Id]
		if !ok {
			return
		}
		delete(a.byPID, m.Who.Id)
		a.p.leaving.Delete(m.Who.Id)
		if key := g.id.AsKey(); a.grains[key].pid == g.pid {
			delete(a.grains, key)
		}
		if kind := a.p.c.GetClusterKind(g.id.Kind); kind != nil {
			kind.Dec()
		}
	case *pcluster.ClusterTopology:
		if a.p.Directory != nil {
			return // grains stay while their member is up
		}
		self := a.p.c.ActorSystem.Address()
		for _, g := range a.grains {
			if o := Owner(m.Members, g.id.Kind, g.id.Identity, a.p.weight, a.p.Avoid); o == nil || o.Address() != self {
				ctx.Poison(g.pid) // placed elsewhere now: it passivates, its state is in the store
			}
		}
	case *actor.Stopping:
		for _, g := range a.byPID {
			if err := ctx.PoisonFuture(g.pid).Wait(); err != nil {
				ctx.Logger().Error("passivate a grain", slog.String("grain", g.id.AsKey()), slog.Any("error", err))
			}
		}
	}
}
