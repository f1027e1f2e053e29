// Several members in one process: protoactor's remote.Start sets grpc's
// global logger while the members started before it log through it, a race
// that one member per process (wts serve) never has; so not under -race.

//go:build !race

package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// where is a grain that answers with the address of the member hosting it.
func where() *pcluster.Kind {
	return pcluster.NewKind("where", actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*wrapperspb.StringValue); ok {
			ctx.Respond(wrapperspb.String(ctx.ActorSystem().Address()))
		}
	}))
}

type member struct {
	sys    *actor.ActorSystem
	c      *pcluster.Cluster
	gossip *Gossip
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startGossip(t testing.TB, join []string) *member {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	g := NewGossip(GossipConfig{Bind: "127.0.0.1:0", Join: join, Capacity: Capacity{Threads: 2}, Log: quiet()})
	c, err := Start(sys, Config{Name: "gossip-test", Host: "127.0.0.1", RequestTimeout: 2 * time.Second, Gossip: g}, where())
	if err != nil {
		t.Fatal(err)
	}
	return &member{sys: sys, c: c, gossip: g}
}

// members are the actor addresses in m's published topology.
func (m *member) members() []string {
	var out []string
	for _, x := range m.c.MemberList.Members().Members() {
		out = append(out, x.Address())
	}
	slices.Sort(out)
	return out
}

// waitMembers waits until every member of ms publishes want.
func waitMembers(t testing.TB, within time.Duration, want []string, ms ...*member) time.Duration {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	start := time.Now()
	for {
		ok := true
		for _, m := range ms {
			ok = ok && slices.Equal(m.members(), want)
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			for _, m := range ms {
				t.Logf("%s sees %v", m.sys.Address(), m.members())
			}
			t.Fatalf("members did not converge on %v within %v", want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hosts asks, through m, where each of n identities lives.
func hosts(t testing.TB, m *member, n int) map[string]string {
	t.Helper()
	out, err := locate(m, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// locate asks grains g0 … g(n-1) through m where each lives.
func locate(m *member, n int) (map[string]string, error) {
	out := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("g%d", i)
		v, err := m.c.Request(id, "where", wrapperspb.String(""))
		if err != nil {
			return nil, fmt.Errorf("%s via %s: %w", id, m.sys.Address(), err)
		}
		out[id] = v.(*wrapperspb.StringValue).Value
	}
	return out, nil
}

// Three members join by gossip and agree on the topology and on where each
// grain lives, reached from any of them; the metadata carries capacity;
// a member that leaves is gone from the others at once, and one that dies
// without a word within DeadWithin, its grains then found on the others.
func TestGossip(t *testing.T) {
	a := startGossip(t, nil)
	defer a.c.Shutdown(true)
	b := startGossip(t, []string{a.gossip.Addr()})
	c := startGossip(t, []string{b.gossip.Addr()}) // through any member
	all := []string{a.sys.Address(), b.sys.Address(), c.sys.Address()}
	waitMembers(t, 5*time.Second, all, a, b, c)

	for _, n := range a.gossip.Nodes() {
		if n.Capacity.Threads != 2 || !slices.Contains(n.Kinds, "where") || n.Gossip == "" {
			t.Fatalf("metadata: %+v", n)
		}
	}
	placed := hosts(t, a, 30)
	for _, m := range []*member{b, c} {
		if got := hosts(t, m, 30); fmt.Sprint(got) != fmt.Sprint(placed) {
			t.Fatalf("placement seen from %s differs:\n%v\n%v", m.sys.Address(), got, placed)
		}
	}
	used := map[string]bool{}
	for _, h := range placed {
		used[h] = true
	}
	if len(used) < 2 {
		t.Fatalf("30 grains all on %v", used)
	}

	// c leaves gracefully: gone at once.
	c.c.Shutdown(true)
	waitMembers(t, 3*time.Second, []string{a.sys.Address(), b.sys.Address()}, a, b)

	// b dies: its gossip stops without a leave, as a killed process's does.
	if err := b.gossip.Shutdown(false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	took := waitMembers(t, DeadWithin+2*time.Second, []string{a.sys.Address()}, a)
	t.Logf("dead member out after %v (bound %v)", time.Since(start), DeadWithin)
	if took > DeadWithin {
		t.Fatalf("a dead member was removed after %v, bound %v", took, DeadWithin)
	}
	// A call that a's cache of activations still sent to b times out and
	// clears it; on a loaded machine that can outlast the member's removal
	// by a few request timeouts, so the grains are asked again until then.
	deadline := time.Now().Add(3 * 2 * time.Second)
	for {
		got, err := locate(a, 30)
		var on string
		for id, h := range got {
			if h != a.sys.Address() {
				on = id + " on " + h
			}
		}
		if err == nil && on == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the dead member's removal: %v %s", err, on)
		}
	}
	b.sys.Shutdown()
}

// A join to an address where nobody listens fails, and says so.
func TestGossipJoinNobody(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	g := NewGossip(GossipConfig{Bind: "127.0.0.1:0", Join: []string{"127.0.0.1:1"}, Log: quiet()})
	if _, err := Start(sys, Config{Name: "gossip-test", Host: "127.0.0.1", RequestTimeout: time.Second, Gossip: g}, where()); err == nil {
		t.Fatal("joined nobody")
	}
}

// A member's devices travel in its metadata, and their free memory again
// once it moves; GPU memory, not free memory, is the member's weight.
func TestGossipDevices(t *testing.T) {
	a := startGossip(t, nil)
	defer a.c.Shutdown(true)
	b := startGossip(t, []string{a.gossip.Addr()})
	defer b.c.Shutdown(true)
	waitMembers(t, 5*time.Second, []string{a.sys.Address(), b.sys.Address()}, a, b)
	var free atomic.Int64
	free.Store(6 << 30)
	devices := func() []Device {
		return []Device{{ID: "cpu0", Kind: "cpu", Name: "test", Memory: 8 << 30, Free: free.Load()},
			{ID: "cuda0", Kind: "cuda", Name: "H100", Memory: 80 << 30, Free: 79 << 30}}
	}
	if err := a.gossip.SetDevices(devices); err != nil {
		t.Fatal(err)
	}
	seen := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got, ok := b.gossip.Free(a.sys.ID)
			if ok && got == want+79<<30 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("free memory seen from the other member: %d %v, want %d", got, ok, want+79<<30)
			}
		}
	}
	seen(6 << 30)
	free.Store(3 << 30)
	seen(3 << 30)
	if w := b.gossip.Weight(a.sys.ID); w != 80 {
		t.Fatalf("weight of a member with an 80 GiB GPU: %v", w)
	}
	if _, ok := a.gossip.Free(b.sys.ID); ok {
		t.Fatal("a member that announced no device has free memory")
	}
}
