package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
)

// Capacity is what a node offers its grains' executors: announced in its
// membership metadata, read by placement.
type Capacity struct {
	Threads  int      `msgpack:"t"`            // CPU threads the engine uses
	Models   []string `msgpack:"m,omitempty"`  // the base models its catalog serves
	Trainers int      `msgpack:"tr,omitempty"` // provider_a's dedicated trainers it offers (actors/slots)
	// Devices are the devices its executors own, with what each has free,
	// announced again when that moves (Gossip.SetDevices).
	Devices []Device `msgpack:"d,omitempty"`
}

// Device is one device a node's executors own, as its metadata announces
// it: what placement reads of it.
type Device struct {
	ID     string `msgpack:"i"` // "cpu0", "cuda0"
	Kind   string `msgpack:"k"` // "cpu", "cuda"
	Name   string `msgpack:"n"`
	Memory int64  `msgpack:"m"` // bytes its executors may use
	Free   int64  `msgpack:"f"` // of Memory, bytes not taken
}

// Weight is the node's share of the grains (Placement): its GPU memory in
// GiB where it has GPUs, since its trainers and samplers run there, else
// its CPU threads. It reads no free memory: a member's weight must not
// move while it is up.
func (c Capacity) Weight() float64 {
	var gpu int64
	for _, d := range c.Devices {
		if d.Kind != "cpu" {
			gpu += d.Memory
		}
	}
	if gpu > 0 {
		return float64(gpu) / (1 << 30)
	}
	return float64(max(c.Threads, 1))
}

// Free is the memory free across the node's devices, and whether it
// announced any.
func (c Capacity) Free() (int64, bool) {
	var free int64
	for _, d := range c.Devices {
		free += d.Free
	}
	return free, len(c.Devices) > 0
}

// Node is one member as its metadata announces it.
type Node struct {
	ID       string   `msgpack:"i"` // the actor system's id (protoactor's member id); "" until it hosts grains
	Host     string   `msgpack:"h"` // its actor remote
	Port     int      `msgpack:"p"`
	Kinds    []string `msgpack:"k"`
	Capacity Capacity `msgpack:"c"`
	// Load is how many grains of each kind the node holds in memory,
	// announced again when it changes (Placement's free capacity).
	Load map[string]int `msgpack:"l,omitempty"`
	// Store is where the node serves the cluster's shared store to the
	// others ("" when it serves none).
	Store string `msgpack:"s,omitempty"`
	// Gossip is the node's memberlist address (from memberlist, not the
	// metadata).
	Gossip string `msgpack:"-"`
}

// GossipConfig configures membership by gossip (hashicorp/memberlist's
// SWIM): how this node is found and whom it joins.
type GossipConfig struct {
	Bind      string   // host:port the gossip listens on (UDP and TCP); port 0: any free one
	Advertise string   // host:port the others reach it at ("": Bind)
	Join      []string // members to join (none: this node starts a cluster)
	Capacity  Capacity
	Log       *slog.Logger
	// Transport, when set, carries the gossip in place of memberlist's own
	// network transport on Bind (a test cuts it to split the cluster).
	Transport memberlist.NodeAwareTransport
}

// Membership timing. A node that stops answering is suspected after a
// failed probe (ProbeInterval, ProbeTimeout, indirect probes through
// others) and declared dead when its suspicion times out: between
// suspicionMult·ProbeInterval and suspicionMaxMult times that, shorter the
// more members confirm it. Health awareness may stretch the probe interval
// of a node that is itself slow, at most awarenessMax times. So a dead
// member leaves the topology within DeadWithin, the bound docs/cluster.md
// states.
const (
	probeInterval    = time.Second
	probeTimeout     = 500 * time.Millisecond
	suspicionMult    = 2
	suspicionMaxMult = 2
	awarenessMax     = 2
	DeadWithin       = awarenessMax*probeInterval + probeTimeout + suspicionMaxMult*suspicionMult*probeInterval + republishEvery
	// republishEvery is how often the member list is published to
	// protoactor again, events or not.
	republishEvery = time.Second
	// reconnectEvery is how often members declared dead are joined again,
	// for up to reconnectFor (a machine gone for good is then forgotten).
	reconnectEvery = 2 * time.Second
	reconnectFor   = 24 * time.Hour
	leaveTimeout   = 5 * time.Second
)

// metaLimit is memberlist's bound on a node's metadata.
const metaLimit = memberlist.MetaMaxSize

// Gossip is a protoactor ClusterProvider whose members come from
// hashicorp/memberlist: each node's metadata carries its actor address,
// kinds and capacity, and the member list is published to protoactor on
// every join, leave and update, and on a timer. A node may gossip (Open)
// before its actor system joins (StartMember): it then finds the
// cluster's store in the others' metadata, and is not yet a member that
// hosts grains.
type Gossip struct {
	cfg       GossipConfig
	log       *slog.Logger
	ml        *memberlist.Memberlist
	c         *pcluster.Cluster
	mu        sync.Mutex
	self      Node // guarded by mu: memberlist asks for it (NodeMeta) at any time
	meta      []byte
	changed   chan struct{} // a membership event to publish (buffered: one pending)
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	wmu       sync.Mutex
	published map[string]Node // by member id, as last published
	// lost holds, guarded by mu, the gossip addresses of members that
	// left or were declared dead, and since when: they are joined again
	// now and then (reconnect), so that the two sides of a healed split
	// merge (memberlist never probes a member it declared dead). One that
	// left on purpose answers, if at all, that it has left, and stays out.
	lost         map[string]time.Time
	reconnecting atomic.Bool
	announcing   atomic.Bool // a load announcement in flight
	// devices reads the node's devices now (SetDevices; nil: none).
	devices atomic.Pointer[func() []Device]
}

// NewGossip returns a provider with the given configuration.
func NewGossip(cfg GossipConfig) *Gossip {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Gossip{cfg: cfg, log: log.With("part", "gossip"), self: Node{Capacity: cfg.Capacity},
		changed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), lost: map[string]time.Time{}}
}

// Open starts gossip under name and joins the configured members.
func (g *Gossip) Open(name string) error {
	if err := g.setMeta(func(*Node) {}); err != nil {
		return err
	}
	mc, err := g.config(name)
	if err != nil {
		return err
	}
	if g.ml, err = memberlist.Create(mc); err != nil {
		return fmt.Errorf("gossip on %s: %w", g.cfg.Bind, err)
	}
	if len(g.cfg.Join) > 0 {
		if _, err := g.ml.Join(g.cfg.Join); err != nil {
			_ = g.ml.Shutdown()
			return fmt.Errorf("join %v: %w", g.cfg.Join, err)
		}
	}
	g.log.Info("gossip started", "gossip", g.Addr(), "joined", g.cfg.Join, "members", g.ml.NumMembers())
	return nil
}

// setMeta changes this node's metadata and, once gossip runs, tells the
// others.
func (g *Gossip) setMeta(change func(*Node)) error {
	g.mu.Lock()
	n := g.self
	change(&n)
	meta, err := msgpack.Marshal(n)
	switch {
	case err != nil:
		err = fmt.Errorf("member metadata: %w", err)
	case len(meta) > metaLimit:
		err = fmt.Errorf("member metadata is %d bytes, memberlist carries %d", len(meta), metaLimit)
	default:
		g.self, g.meta = n, meta
	}
	g.mu.Unlock()
	if err != nil || g.ml == nil {
		return err
	}
	if err := g.ml.UpdateNode(leaveTimeout); err != nil {
		return fmt.Errorf("announce member metadata: %w", err)
	}
	return nil
}

// SetTrainers announces how many dedicated trainers this node offers.
func (g *Gossip) SetTrainers(n int) error {
	return g.setMeta(func(nd *Node) { nd.Capacity.Trainers = n })
}

// SetDevices announces the devices that devices reads, and reads them
// again every republishEvery, announcing them when their free memory moved
// by a hundredth of theirs or more.
func (g *Gossip) SetDevices(devices func() []Device) error {
	g.devices.Store(&devices)
	ds := devices()
	return g.setMeta(func(nd *Node) { nd.Capacity.Devices = ds })
}

// SetStore announces where this node serves the cluster's store.
func (g *Gossip) SetStore(addr string) error {
	return g.setMeta(func(n *Node) { n.Store = addr })
}

// StartMember announces this member's actor address and kinds (gossiping
// first if Open was not called) and publishes the member list before it
// returns.
func (g *Gossip) StartMember(c *pcluster.Cluster) error {
	g.c = c
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("member address: %w", err)
	}
	if g.ml == nil {
		if err := g.Open(c.ActorSystem.ID); err != nil {
			return err
		}
	}
	if err := g.setMeta(func(n *Node) {
		n.ID, n.Host, n.Port, n.Kinds = c.ActorSystem.ID, host, port, c.GetClusterKinds()
	}); err != nil {
		return err
	}
	g.publish()
	go g.loop()
	return nil
}

func (g *Gossip) config(name string) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	if g.cfg.Transport != nil {
		mc.Transport = g.cfg.Transport
	} else {
		host, port, err := splitHostPort(g.cfg.Bind)
		if err != nil {
			return nil, fmt.Errorf("gossip address %q: %w", g.cfg.Bind, err)
		}
		mc.BindAddr, mc.BindPort = host, port
	}
	if g.cfg.Advertise != "" {
		var err error
		if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(g.cfg.Advertise); err != nil {
			return nil, fmt.Errorf("advertised gossip address %q: %w", g.cfg.Advertise, err)
		}
	}
	mc.ProbeInterval, mc.ProbeTimeout = probeInterval, probeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult, mc.AwarenessMaxMultiplier = suspicionMult, suspicionMaxMult, awarenessMax
	mc.Delegate, mc.Events = delegate{g}, events{g}
	mc.Logger = slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)
	mc.LogOutput = nil
	return mc, nil
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q", p)
	}
	return host, port, nil
}

// Addr is the address others join this node at.
func (g *Gossip) Addr() string {
	n := g.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// loop publishes the member list on every event and on a timer, and ends
// gossip (without a leave: as a crash would) once the actor system has
// stopped without a graceful Shutdown.
func (g *Gossip) loop() {
	defer close(g.done)
	tick := time.NewTicker(republishEvery)
	defer tick.Stop()
	var reconnected time.Time
	for {
		select {
		case <-g.stop:
			return
		case <-g.changed:
		case <-tick.C:
			if g.c.ActorSystem.IsStopped() {
				g.log.Warn("actor system stopped: gossip ends without a leave")
				_ = g.ml.Shutdown()
				return
			}
			g.announce()
			if time.Since(reconnected) >= reconnectEvery {
				reconnected = time.Now()
				g.reconnect()
			}
		}
		g.publish()
	}
}

// reconnect joins again, in the background, the members lost in the last
// reconnectFor: one that died is refused (and tried again), one that was
// only cut off (a network split) answers, and the two sides' member lists
// merge.
func (g *Gossip) reconnect() {
	g.mu.Lock()
	var addrs []string
	for addr, since := range g.lost {
		if time.Since(since) > reconnectFor {
			delete(g.lost, addr)
			continue
		}
		addrs = append(addrs, addr)
	}
	g.mu.Unlock()
	if len(addrs) == 0 || !g.reconnecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer g.reconnecting.Store(false)
		if n, err := g.ml.Join(addrs); n > 0 {
			g.log.Info("members declared dead answered again", "joined", n, "tried", addrs, "err", err)
		}
	}()
}

// publish hands the live members that host grains to protoactor.
func (g *Gossip) publish() {
	nodes := g.Nodes()
	members := make([]*pcluster.Member, 0, len(nodes))
	published := make(map[string]Node, len(nodes)) // anew: members that left go
	for _, n := range nodes {
		if n.ID != "" {
			members = append(members, &pcluster.Member{Id: n.ID, Host: n.Host, Port: int32(n.Port), Kinds: n.Kinds})
			published[n.ID] = n
		}
	}
	g.wmu.Lock()
	g.published = published
	g.wmu.Unlock()
	g.c.MemberList.UpdateClusterTopology(members)
}

// member is member id as last published.
func (g *Gossip) member(id string) (Node, bool) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	n, ok := g.published[id]
	return n, ok
}

// Load is how many grains of kind member id last announced it holds.
func (g *Gossip) Load(id, kind string) int {
	n, _ := g.member(id)
	return n.Load[kind]
}

// Serves says whether member id announced model in its catalog.
func (g *Gossip) Serves(id, model string) bool {
	n, _ := g.member(id)
	return slices.Contains(n.Capacity.Models, model)
}

// Free is the memory free across member id's devices, as it last
// announced it, and whether it announced any.
func (g *Gossip) Free(id string) (int64, bool) {
	n, _ := g.member(id)
	return n.Capacity.Free()
}

// announce tells the others how many grains of each kind this node holds
// and what its devices have free, when that changed, in the background.
func (g *Gossip) announce() {
	load := map[string]int{}
	for _, k := range g.c.GetClusterKinds() {
		if kind, ok := g.c.TryGetClusterKind(k); ok && kind.Count() > 0 {
			load[k] = int(kind.Count())
		}
	}
	var devices []Device
	if read := g.devices.Load(); read != nil {
		devices = (*read)()
	}
	g.mu.Lock()
	same := maps.Equal(load, g.self.Load) && (devices == nil || sameDevices(devices, g.self.Capacity.Devices))
	g.mu.Unlock()
	if same || !g.announcing.CompareAndSwap(false, true) {
		return
	}
	go func() { // memberlist waits until the update is sent: none may be, to a node alone
		defer g.announcing.Store(false)
		err := g.setMeta(func(n *Node) {
			n.Load = load
			if devices != nil {
				n.Capacity.Devices = devices
			}
		})
		if err != nil {
			g.log.Debug("announce load and devices", "err", err) // the next probe of this node carries it anyway
		}
	}()
}

// sameDevices: b is a as announced, each device's free memory within a
// hundredth of its memory.
func sameDevices(a, b []Device) bool {
	return slices.EqualFunc(a, b, func(x, y Device) bool {
		d := x
		d.Free = y.Free
		return d == y && abs(x.Free-y.Free) < max(x.Memory/100, 1)
	})
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Weight is member id's placement weight, from the capacity it announces
// (Capacity.Weight); a member's capacity is fixed while it is up, so every
// member weighs it alike.
func (g *Gossip) Weight(id string) float64 {
	if n, ok := g.member(id); ok {
		return n.Capacity.Weight()
	}
	return 1
}

// Nodes are the live members (this one included) whose metadata reads;
// one whose ID is empty gossips but hosts no grains yet.
func (g *Gossip) Nodes() []Node {
	var out []Node
	for _, m := range g.ml.Members() {
		var n Node
		if err := msgpack.Unmarshal(m.Meta, &n); err != nil {
			g.log.Warn("member with unreadable metadata", "member", m.Name, "addr", m.Address(), "err", err)
			continue
		}
		n.Gossip = m.Address()
		out = append(out, n)
	}
	return out
}

// StartClient is refused: every process that joins hosts grains.
func (*Gossip) StartClient(*pcluster.Cluster) error {
	return errors.New("a gossip cluster has no clients")
}

// Shutdown leaves the cluster: graceful, the others are told at once;
// otherwise they find the node dead (DeadWithin).
func (g *Gossip) Shutdown(graceful bool) error {
	var err error
	g.once.Do(func() {
		close(g.stop)
		if g.c != nil { // the loop runs
			<-g.done
		}
		if g.ml == nil {
			return
		}
		if graceful {
			if err = g.ml.Leave(leaveTimeout); err != nil {
				err = fmt.Errorf("leave: %w", err)
			}
		}
		if e := g.ml.Shutdown(); e != nil && err == nil {
			err = fmt.Errorf("gossip shutdown: %w", e)
		}
	})
	return err
}

// kick asks loop to publish (never blocks: memberlist calls the event
// delegates with its node lock held, and one pending publish reads every
// change).
func (g *Gossip) kick() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// delegate gives memberlist this node's metadata; the node sends no user
// messages or state of its own.
type delegate struct{ g *Gossip }

func (d delegate) NodeMeta(int) []byte           { return d.g.meta }
func (delegate) NotifyMsg([]byte)                {}
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}

// events publishes the member list on every change.
type events struct{ g *Gossip }

func (e events) NotifyJoin(n *memberlist.Node) {
	e.g.log.Info("member joined", "member", n.Name, "gossip", n.Address())
	e.g.mu.Lock()
	delete(e.g.lost, n.Address())
	e.g.mu.Unlock()
	e.g.kick()
}

func (e events) NotifyLeave(n *memberlist.Node) {
	e.g.log.Info("member left", "member", n.Name, "gossip", n.Address())
	e.g.mu.Lock()
	e.g.lost[n.Address()] = time.Now() // dead or left, memberlist does not say here (reconnect)
	e.g.mu.Unlock()
	e.g.kick()
}

func (e events) NotifyUpdate(*memberlist.Node) { e.g.kick() }
