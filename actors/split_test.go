// Several members in one process: protoactor's remote.Start sets grpc's
// global logger while the members started before it log through it, a race
// that one member per process (wts serve) never has; so not under -race.

//go:build !race

package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/persistence/etcdstore"
	"github.com/wts-project/wts/providers"
)

// cut is a member's gossip transport that drops what it sends to the
// members it is cut off from; each side cutting the other is a symmetric
// split of the membership.
type cut struct {
	*memberlist.NetTransport
	mu  sync.Mutex
	off map[string]bool // gossip addresses
}

func (c *cut) blocked(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.off[addr]
}

// set cuts the member off from addrs (none: heals).
func (c *cut) set(addrs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = map[string]bool{}
	for _, a := range addrs {
		c.off[a] = true
	}
}

var errCut = errors.New("cut off")

func (c *cut) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.blocked(addr) {
		return time.Now(), nil // lost on the way, as UDP may be
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cut) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return c.WriteTo(b, a.Addr)
}

func (c *cut) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if c.blocked(addr) {
		return nil, errCut
	}
	return c.NetTransport.DialTimeout(addr, d)
}

func (c *cut) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	return c.DialTimeout(a.Addr, d)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// member is one node of the split test's cluster.
type member struct {
	sys    *actors.System
	gossip *cluster.Gossip
	cut    *cut
}

func startMember(t *testing.T, name, data string, srv *etcdstore.Server, reg *providers.Registry, join ...string) *member {
	return startMemberWith(t, name, data, srv, actors.Config{Registry: reg}, join...)
}

// startMemberWith starts a member with cfg (its store, gossip and folder
// set here).
func startMemberWith(t *testing.T, name, data string, srv *etcdstore.Server, cfg actors.Config, join ...string) *member {
	t.Helper()
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	c := &cut{NetTransport: nt}
	g := cluster.NewGossip(cluster.GossipConfig{Join: join, Capacity: cluster.Capacity{Threads: 1}, Transport: c, Log: quiet()})
	if err := g.Open(name); err != nil {
		t.Fatal(err)
	}
	st, err := etcdstore.Open(etcdstore.Config{Client: srv.Client, Prefix: "wts/", BlobDir: filepath.Join(data, "blobs"), Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Store, cfg.Gossip, cfg.RemoteHost = data, st, g, "127.0.0.1"
	sys := nodetest.StartWith(t, cfg)
	return &member{sys: sys, gossip: g, cut: c}
}

// waitSees waits until each of ms sees exactly n live members.
func waitSees(t *testing.T, n int, ms ...*member) {
	t.Helper()
	deadline := time.Now().Add(cluster.DeadWithin + 10*time.Second)
	for _, m := range ms {
		for len(m.gossip.Nodes()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d members, want %d", m.gossip.Addr(), len(m.gossip.Nodes()), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// submitVia submits run's operation seq through s, again while it answers
// unavailable (an activation fenced by a newer one, leaving), and waits
// for it to end; it returns the operation and how many fenced answers
// came first.
func submitVia(t *testing.T, s *actors.System, run string, seq int64) (*persistence.Operation, int) {
	t.Helper()
	kind, p := payload.ForwardBackward, nodetest.Batch(int(seq))
	if seq%2 == 0 {
		kind, p = payload.OptimStep, json.RawMessage(`{"adam_params":{"learning_rate":0.01}}`)
	}
	sub := protocol.Submission{Tenant: nodetest.Tenant, Target: run, SeqID: seq, IdempotencyKey: fmt.Sprint("k", seq), RequestHash: fmt.Sprint("h", seq), Kind: kind, Payload: p}
	fenced := 0
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		acc, err := s.Submit(sub)
		var e *protocol.Error
		switch {
		case err == nil:
			return nodetest.Wait(t, s, acc.Op.ID), fenced
		case errors.As(err, &e) && e.Code == protocol.CodeUnavailable && time.Now().Before(deadline):
			fenced++
		default:
			t.Fatalf("seq %d: %v", seq, err)
		}
	}
}

// voter starts an etcd voter for the members of a test, in a data folder
// they share (skipped with -short), and stops it when the test ends.
func voter(t *testing.T) (*etcdstore.Server, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts cluster members and an etcd voter")
	}
	data := t.TempDir()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	srv, err := etcdstore.Serve(etcdstore.ServerConfig{Name: "store", Dir: filepath.Join(data, "etcd"), Peer: free(), Client: free(), Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close) // after the members, which the test stops
	return srv, data
}

// pair starts two members a and b with cfg on the voter srv, waits until
// each sees the other, and stops them together when the test ends.
func pair(t *testing.T, srv *etcdstore.Server, data string, cfg actors.Config) (*member, *member) {
	a := startMemberWith(t, "a", data, srv, cfg)
	b := startMemberWith(t, "b", data, srv, cfg, a.gossip.Addr())
	t.Cleanup(func() {
		var stopping sync.WaitGroup
		for _, m := range []*member{a, b} {
			stopping.Add(1)
			go func() { defer stopping.Done(); m.sys.Stop(context.Background()) }()
		}
		stopping.Wait()
	})
	waitSees(t, 2, a, b)
	return a, b
}

// An organization's live sessions and runs are bounded across the
// cluster, whichever node creates or ends them; a session that ends drops
// its placement record.
func TestLiveLimitsClusterWide(t *testing.T) {
	srv, data := voter(t)
	cfg := actors.Config{Registry: nodetest.Registry(t), Limits: limits.Limits{RunQueue: 10, OrgQueue: 10, NodeQueue: 10, QueueBytes: 1 << 20, OrgSessions: 2, OrgRuns: 2}}
	a, b := pair(t, srv, data, cfg)
	nodetest.Credit(t, a.sys)
	create := func(via *member, id string) (*protocol.Session, error) {
		s, _, err := via.sys.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: id})
		return s, err
	}
	first, err := create(a, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create(b, "s2"); err != nil {
		t.Fatal(err)
	}
	var e *protocol.Error
	for _, via := range []*member{a, b} {
		if _, err := create(via, "s3"); !errors.As(err, &e) || e.Code != protocol.CodeLimitExceeded {
			t.Fatalf("a third live session, through %s: %v", via.gossip.Addr(), err)
		}
	}
	placed := func() bool { // the session's placement record
		var ok bool
		if err := a.sys.Store().View(func(tx persistence.Tx) (err error) {
			var rec struct {
				Member string `msgpack:"m"`
			}
			ok, err = tx.Get(persistence.Placements, []byte(protocol.SessionKind+"/"+first.ID), &rec)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := b.sys.Heartbeat(nodetest.Tenant, first.ID); err != nil { // its grain activates, placed
		t.Fatal(err)
	}
	if !placed() {
		t.Fatal("the session's placement is not recorded")
	}
	if _, err := b.sys.CloseSession(nodetest.Tenant, first.ID); err != nil {
		t.Fatal(err)
	}
	if placed() {
		t.Error("the closed session's placement record is still there")
	}
	if _, err := create(a, "s3"); err != nil {
		t.Fatalf("a session after one closed on the other node: %v", err)
	}
}

// Two nodes create sessions of one organization at once, every one asking
// to reserve 30 USD of the 100 USD of headroom it has above the credit
// floor: three get it, whichever node they went through, and the ledger
// holds exactly their reservations.
func TestCreditFloorClusterWide(t *testing.T) {
	srv, data := voter(t)
	cfg := actors.Config{Registry: nodetest.Registry(t)}
	a, b := pair(t, srv, data, cfg)
	fresh := persistence.Tenant{Org: "fresh"}
	ceiling := int64(30_000_000)
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			via := []*member{a, b}[i%2]
			_, _, err := via.sys.CreateSession(protocol.NewSession{Tenant: fresh, RequestID: fmt.Sprint("s", i), MaxCostMicroUSD: &ceiling})
			var e *protocol.Error
			switch {
			case err == nil:
				created.Add(1)
			case errors.As(err, &e) && e.Code == protocol.CodeInsufficientCredit:
				refused.Add(1)
			default:
				t.Errorf("session %d through %s: %v", i, via.gossip.Addr(), err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 3 || refused.Load() != 9 {
		t.Fatalf("%d sessions created and %d refused; want 3 and 9", created.Load(), refused.Load())
	}
	for _, m := range []*member{a, b} {
		l, err := m.sys.Ledger(fresh, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if l.Account.Reserved != 90_000_000 || l.Account.Headroom() != 10_000_000 || len(l.Entries) != 3 {
			t.Fatalf("the ledger through %s: %+v, %d entries", m.gossip.Addr(), l.Account, len(l.Entries))
		}
	}
}

// dedicatedRun creates, through via, a provider_a session (request id) and
// its run, and returns the run's id and the member of its session's
// dedicated trainer.
func dedicatedRun(t *testing.T, via *member, request string) (run, trainer string) {
	t.Helper()
	ss, _, err := via.sys.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: request, Provider: "provider_a"})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := via.sys.Registry().Catalog().Lookup("tiny")
	rr, err := via.sys.CreateRun(protocol.NewRun{Tenant: nodetest.Tenant, SessionID: ss.ID, RequestID: "r", BaseModel: "tiny", ModelRevision: m.Revision,
		TuningMode: "lora", LoRA: &persistence.LoRA{Rank: 4, Seed: 1, TrainAttn: true}})
	if err != nil {
		t.Fatal(err)
	}
	var rec persistence.Session
	if err := via.sys.Store().View(func(tx persistence.Tx) error { _, err := persistence.GetSession(tx, ss.ID, &rec); return err }); err != nil {
		t.Fatal(err)
	}
	return rr.Run.ID, rec.TrainerMember
}

// Two nodes offer one dedicated trainer each: two provider_a sessions,
// whichever node creates them, hold one on each node, a third is refused,
// and each session's run is placed on its trainer's node and trains there.
func TestDedicatedTrainersClusterWide(t *testing.T) {
	srv, data := voter(t)
	reg := nodetest.Registry(t)
	a, b := pair(t, srv, data, actors.Config{Registry: reg, DedicatedTrainers: 1})
	nodetest.Credit(t, a.sys)
	held := map[string]bool{}
	for i, via := range []*member{a, b} {
		run, trainer := dedicatedRun(t, via, fmt.Sprint("s", i))
		op, _ := submitVia(t, []*member{b, a}[i].sys, run, 1)
		nodetest.Loss(t, op)
		var placed struct {
			Member string `msgpack:"m"`
		}
		if err := a.sys.Store().View(func(tx persistence.Tx) error {
			_, err := tx.Get(persistence.Placements, []byte(protocol.RunKind+"/"+run), &placed)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if trainer == "" || placed.Member != trainer || held[trainer] {
			t.Fatalf("session %d: trainer on %q, run placed on %q (trainers held: %v)", i, trainer, placed.Member, held)
		}
		held[trainer] = true
	}
	for _, via := range []*member{a, b} {
		if _, _, err := via.sys.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "s3", Provider: "provider_a"}); protocol.AsError(err).Code != protocol.CodeProviderFull {
			t.Fatalf("a third provider_a session through %s: %v", via.gossip.Addr(), err)
		}
	}
}

// A provider_a session's dedicated trainer follows its run: when the node
// it was reserved on stops, the run is placed anew and trains on the other
// node, which counts the trainer from then on (full at its two, where it
// would otherwise take a session more).
func TestDedicatedTrainerFollowsItsRun(t *testing.T) {
	srv, data := voter(t)
	reg := nodetest.Registry(t)
	cfg := actors.Config{Registry: reg, DedicatedTrainers: 2}
	a := startMemberWith(t, "a", data, srv, cfg)
	b := startMemberWith(t, "b", data, srv, cfg, a.gossip.Addr())
	waitSees(t, 2, a, b)
	nodetest.Credit(t, a.sys)
	var runs, trainers [2]string
	for i := range 2 {
		runs[i], trainers[i] = dedicatedRun(t, a, fmt.Sprint("s", i))
	}
	if trainers[0] == trainers[1] {
		t.Fatalf("both sessions' trainers on %s", trainers[0])
	}
	gone, stays := a, b
	if trainers[0] == b.sys.Node().Self {
		gone, stays = b, a
	}
	gone.sys.Stop(context.Background())
	t.Cleanup(func() { stays.sys.Stop(context.Background()) })
	waitSees(t, 1, stays)
	op, _ := submitVia(t, stays.sys, runs[0], 1)
	nodetest.Loss(t, op)
	if _, _, err := stays.sys.CreateSession(protocol.NewSession{Tenant: nodetest.Tenant, RequestID: "s2", Provider: "provider_a"}); protocol.AsError(err).Code != protocol.CodeProviderFull {
		t.Fatalf("a third provider_a session on the node whose two trainers the runs hold: %v", err)
	}
}

// The membership splits in two while both sides keep running and keep the
// store (the worst case: each side places the run on itself, and each
// activation can reach the store). A run trained through one side, then
// the other, then the first again: each time, the side that lost the
// run's lease cannot write (its activation is refused, answers
// unavailable and leaves; the next call takes the lease over from the
// store), and after the split heals nothing was applied twice: every
// operation succeeded once, in order, with the losses and optimizer steps
// of the same run trained on one node.
func TestSplitMembership(t *testing.T) {
	srv, data := voter(t)
	reg := nodetest.Registry(t)
	a := startMember(t, "a", data, srv, reg)
	ms := []*member{a, startMember(t, "b", data, srv, reg, a.gossip.Addr()), startMember(t, "c", data, srv, reg, a.gossip.Addr())}
	defer func() {
		var stopping sync.WaitGroup
		for _, m := range ms {
			stopping.Add(1)
			go func() { defer stopping.Done(); m.sys.Stop(context.Background()) }()
		}
		stopping.Wait()
	}()
	waitSees(t, 3, ms...)

	// The same run on one node alone: the figures a run that nothing was
	// applied twice to must show.
	ref := nodetest.Start(t, reg, t.TempDir())
	_, refRun := nodetest.NewRun(t, ref)
	const ops = 10
	var want []*persistence.Operation
	for seq := int64(1); seq <= ops; seq++ {
		op, _ := submitVia(t, ref, refRun.ID, seq)
		want = append(want, op)
	}
	ref.Stop(context.Background())

	_, run := nodetest.NewRun(t, a.sys)
	for seq := int64(1); seq <= 4; seq++ {
		submitVia(t, a.sys, run.ID, seq)
	}
	var owner *member
	var others []*member
	for _, m := range ms {
		if m.sys.Grains()[protocol.RunKind] > 0 {
			owner = m
		} else {
			others = append(others, m)
		}
	}
	if owner == nil {
		t.Fatal("no member hosts the run")
	}
	owner.cut.set(others[0].gossip.Addr(), others[1].gossip.Addr())
	for _, m := range others {
		m.cut.set(owner.gossip.Addr())
	}
	waitSees(t, 1, owner)
	waitSees(t, 2, others...)

	// The larger side takes the run over (its placement: itself) and trains.
	for seq := int64(5); seq <= 6; seq++ {
		submitVia(t, others[0].sys, run.ID, seq)
	}
	// The cut-off side's activation still holds the run in memory: it is
	// refused and leaves; the retry takes the lease over from the store.
	if _, fenced := submitVia(t, owner.sys, run.ID, 7); fenced == 0 {
		t.Error("the side that lost the run's lease answered at once")
	}
	// And back: the larger side's activation is now the stale one.
	if _, fenced := submitVia(t, others[1].sys, run.ID, 8); fenced == 0 {
		t.Error("the larger side, its lease taken, answered at once")
	}

	for _, m := range ms {
		m.cut.set()
	}
	waitSees(t, 3, ms...)
	for seq := int64(9); seq <= ops; seq++ {
		submitVia(t, ms[int(seq)%3].sys, run.ID, seq)
	}

	page, err := a.sys.ListOperations(nodetest.Tenant, run.ID, 0, 100)
	if err != nil || len(page.Items) != ops {
		t.Fatalf("operations after the split healed: %v %+v", err, page)
	}
	for i, op := range page.Items {
		if op.SeqID != int64(i+1) || op.Status != states.OpSucceeded || string(op.Result) != string(want[i].Result) {
			t.Errorf("seq %d: %s %s, want %s (trained on one node)", op.SeqID, op.Status, op.Result, want[i].Result)
		}
	}
}
