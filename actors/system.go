// Package actors is the node: System wires the grain kinds (actors/session,
// actors/run, actors/sampler) to the grain runtime (actors/grain), the
// executors (actors/executor), the store and the exporter, and is the front
// door the HTTP layer calls. It holds no business rule of its own: each
// write goes to the grain that owns it (through its typed client in
// actors/protocol), and reads go straight to the store, which holds only
// committed state.
package actors

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/reminder"
	"github.com/wts-project/wts/actors/run"
	"github.com/wts-project/wts/actors/sampler"
	"github.com/wts-project/wts/actors/session"
	"github.com/wts-project/wts/actors/slots"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/actors/telemetry"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/hub"
)

// Config configures a node.
type Config struct {
	DataDir string // the store file (unless Store is given) and the run volume live here
	// Store is the node's durable state; nil opens the write-ahead-logged
	// bbolt file in DataDir. Once started, the node closes it when it stops.
	Store persistence.Store
	// SamplerIdle is how long a sampler may go unused before it releases
	// its adapter from memory (default 10 minutes).
	SamplerIdle time.Duration
	// DedicatedTrainers is how many provider_a sessions may hold a trainer
	// of this node at once (default 16; slots).
	DedicatedTrainers int
	// SettleAfter is how long after it is observed a pending usage
	// component (provider_a's) is settled, as the provider's invoice would
	// settle it (default 10 minutes).
	SettleAfter time.Duration
	// GrainIdle is how long a grain with nothing in flight stays in memory
	// after its last message before it passivates (default 10 minutes); the
	// next message activates it again from the store.
	GrainIdle time.Duration
	// CredentialsKey is the file of the key that seals customer credentials
	// (default: secrets/credentials.key in the data folder).
	CredentialsKey string
	// HubEndpoint is where hub exports go (hub.DefaultEndpoint when empty).
	HubEndpoint string
	Registry    *providers.Registry
	Log         *slog.Logger
	// SnapshotEvery is the least compute time between two trainer snapshots
	// of a run (taken after an optim_step); the operations since the last
	// snapshot are replayed after a restart.
	SnapshotEvery time.Duration
	// Now is the clock (tests move it); nil is time.Now.
	Now func() time.Time
	// Metrics are the node's collectors; nil makes a fresh set.
	Metrics *telemetry.Metrics
	// Limits bound queues and live sessions and runs; the zero value is
	// limits.Default.
	Limits limits.Limits
	// MemoryBudget bounds the bytes of trainers, samplers' adapters and KV
	// caches together (see memory); 0 is no bound.
	MemoryBudget int64
	// Wire sends every message between actors msgpack-encoded, as between
	// nodes, local ones included: a test mode that drives the remote path
	// (grain.Router.Wire).
	Wire bool
	// Gossip, when set, makes the node a member of a cluster (cluster.Join
	// started it, and Store is the cluster's): its actor remote listens on
	// RemoteHost:RemotePort, where the other members reach it.
	Gossip     *cluster.Gossip
	RemoteHost string
	RemotePort int
	// RemoteBind is the local host the actor remote listens on, when it
	// is not RemoteHost (reached through NAT or a port mapping).
	RemoteBind string
	// Role is what the node hosts in a cluster: RoleAll (or ""),
	// RoleTrain (sessions and runs, so their trainers) or RoleSample
	// (samplers, so their sampling executors).
	Role string
}

// The roles a node may take in a cluster (Config.Role).
const (
	RoleAll    = "all"
	RoleTrain  = "train"
	RoleSample = "sample"
)

// Roles names the roles, for flags and their errors.
var Roles = []string{RoleAll, RoleTrain, RoleSample}

// System is one node: the actor system, its cluster (of one, or of every
// node that gossips with it), the store, the executors, the exporter, and
// the Node its grains share.
type System struct {
	cfg      Config
	n        *protocol.Node
	actors   *actor.ActorSystem
	cluster  *pcluster.Cluster
	samplers *executor.Sampling
	exports  *artifacts.Exports
	stop     chan struct{}
	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
}

// Start opens the store, starts the grains and the executor, and wakes every
// run that has work left from before a restart.
func Start(cfg Config) (*System, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.New()
	}
	if cfg.GrainIdle == 0 {
		cfg.GrainIdle = 10 * time.Minute
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = time.Minute
	}
	if cfg.SamplerIdle == 0 {
		cfg.SamplerIdle = 10 * time.Minute
	}
	if cfg.SettleAfter == 0 {
		cfg.SettleAfter = 10 * time.Minute
	}
	if cfg.DedicatedTrainers == 0 {
		cfg.DedicatedTrainers = 16
	}
	if cfg.HubEndpoint == "" {
		cfg.HubEndpoint = hub.DefaultEndpoint
	}
	if cfg.CredentialsKey == "" {
		cfg.CredentialsKey = persistence.SecretPath(cfg.DataDir, "credentials")
	}
	if cfg.Limits == (limits.Limits{}) {
		cfg.Limits = limits.Default()
	}
	vault, err := persistence.OpenVault(cfg.CredentialsKey)
	if err != nil {
		return nil, err
	}
	st := cfg.Store
	if st == nil {
		if st, err = persistence.Open(filepath.Join(cfg.DataDir, "wts.db")); err != nil {
			return nil, err
		}
	}
	st.OnCommit(cfg.Metrics.Commit)
	if err := migrateLeases(st); err != nil {
		st.Close()
		return nil, err
	}
	if err := persistence.IndexListings(st); err != nil {
		st.Close()
		return nil, fmt.Errorf("index listings: %w", err)
	}
	n := &protocol.Node{Store: st, Volume: persistence.NewVolume(cfg.DataDir), Registry: cfg.Registry, Log: cfg.Log,
		Metrics: cfg.Metrics, Clock: cfg.Now, Limits: limits.New(cfg.Limits), SamplerIdle: cfg.SamplerIdle, SettleAfter: cfg.SettleAfter}
	s := &System{cfg: cfg, n: n, stop: make(chan struct{}), exports: artifacts.NewExports(n, vault, cfg.HubEndpoint)}
	n.Trainer, s.samplers, n.Memory = executor.Start(executor.Env{Store: st, Volume: n.Volume, Catalog: cfg.Registry.Catalog(), Log: cfg.Log,
		Metrics: cfg.Metrics, SnapshotEvery: cfg.SnapshotEvery, Reports: protocol.Reports{N: n},
		Checkpoint: func(id string) (*persistence.Checkpoint, error) { return artifacts.Checkpoint(st, id) }}, cfg.MemoryBudget)
	lim, mem := n.Limits, n.Memory
	cfg.Metrics.Gauge("wts_operations_queued", "Operations queued or executing on the node (bounded by --max-queue-node).",
		func() float64 { return float64(lim.Queued().Ops) })
	cfg.Metrics.Gauge("wts_operations_queued_bytes", "Bytes of queued operations' records held in memory (bounded by --max-queue-bytes).",
		func() float64 { return float64(lim.Queued().Bytes) })
	trainer := n.Trainer
	cfg.Metrics.Gauge("wts_trainer_waiting", "Operations and chores in the trainer's executor waiting for their turn (those running a slice not counted).",
		func() float64 { return float64(trainer.Waiting()) })
	cfg.Metrics.Gauge("wts_memory_budget_used_bytes", "Memory taken by trainers, samplers' adapters and KV caches.",
		func() float64 { return float64(mem.InUse()) })
	cfg.Metrics.Gauge("wts_memory_budget_bytes", "The node's budget for trainers, samplers' adapters and KV caches.",
		func() float64 { return float64(mem.Limit()) })
	n.Reminders = reminder.New(n.Now, s.remind)
	n.Router = &grain.Router{Log: cfg.Log, Timeout: requestTimeout, Wire: cfg.Wire, Stop: s.stop}
	n.Runtime = &grain.Runtime{Router: n.Router, Log: cfg.Log, Idle: cfg.GrainIdle, Account: lim.Set}
	s.actors = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(atLeast{cfg.Log.Handler(), slog.LevelWarn}).With("component", "protoactor")
	}))
	pool := actor.WithDispatcher(grain.Dispatcher())
	props := func(a func() actor.Actor) *actor.Props { return actor.PropsFromProducer(a, pool) }
	// Named for this process: a node that restarts on the same address
	// must not take messages meant for its predecessor's executors (plain
	// spawns are numbered from $1 in every process).
	if n.TrainerPID, err = s.actors.Root.SpawnNamed(props(func() actor.Actor { return n.Trainer }), "trainer-"+s.actors.ID); err == nil {
		n.SamplingPID, err = s.actors.Root.SpawnNamed(props(func() actor.Actor { return s.samplers }), "sampling-"+s.actors.ID)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("spawn executors: %w", err)
	}
	n.Router.Actors = s.actors
	host := cmp.Or(cfg.RemoteHost, "127.0.0.1")
	var kinds []*pcluster.Kind
	if cfg.Role != RoleSample {
		kinds = append(kinds, pcluster.NewKind(protocol.SessionKind, props(func() actor.Actor { return session.New(n) })),
			pcluster.NewKind(protocol.RunKind, props(func() actor.Actor { return run.New(n) })))
	}
	if cfg.Role != RoleTrain {
		kinds = append(kinds, pcluster.NewKind(protocol.SamplerKind, props(func() actor.Actor { return sampler.New(n) })))
	}
	// Samplers keep off the members that train while there are members
	// for samplers alone: a sampler never shares a trainer's device then.
	cc := cluster.Config{Name: "wts", Host: host, Port: cfg.RemotePort, RequestTimeout: requestTimeout,
		Avoid: map[string][]string{protocol.SamplerKind: {protocol.RunKind}}}
	if cfg.Gossip != nil { // a cluster: placed by free capacity, recorded in the store
		cc.Gossip, cc.Directory, cc.Needs = cfg.Gossip, st, s.baseModel
	}
	if cfg.RemoteBind != "" && cfg.RemoteBind != host {
		cc.Host, cc.Advertise = cfg.RemoteBind, net.JoinHostPort(host, strconv.Itoa(cfg.RemotePort))
	}
	if cfg.Gossip != nil {
		err := cfg.Gossip.SetTrainers(s.dedicated())
		if err == nil {
			err = cfg.Gossip.SetDevices(s.announcedDevices)
		}
		if err != nil {
			st.Close()
			return nil, err
		}
	}
	s.cluster, err = cluster.Start(s.actors, cc, kinds...)
	if err != nil {
		st.Close()
		return nil, err
	}
	n.Router.Cluster = s.cluster
	n.Trainers, n.Self = s.trainers, s.actors.ID
	if cfg.Gossip != nil {
		n.Router.Watch()
		s.actors.EventStream.Subscribe(s.membersLeft)
	}
	if err := s.countLive(); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	if err := s.wakeRuns(); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	if err := s.armLeases(); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.exports.Run(s.stop) }()
	go func() {
		defer s.wg.Done()
		usage.Settler(st, n.Now, settleEvery(cfg.SettleAfter), func(err error) { n.Log.Error("settle usage", "err", err) }, s.stop)
	}()
	return s, nil
}

// trainers lists the members that host runs, with the dedicated trainers
// each offers: this node alone, or every cluster member whose gossip says
// so.
func (s *System) trainers() []slots.Member {
	if s.cfg.Gossip == nil {
		return []slots.Member{{ID: s.actors.ID, Slots: s.dedicated()}}
	}
	var out []slots.Member
	for _, nd := range s.cfg.Gossip.Nodes() {
		if nd.ID != "" && slices.Contains(nd.Kinds, protocol.RunKind) {
			out = append(out, slots.Member{ID: nd.ID, Slots: nd.Capacity.Trainers})
		}
	}
	return out
}

// dedicated is how many dedicated trainers this node offers: none when it
// hosts no runs.
func (s *System) dedicated() int {
	if s.cfg.Role == RoleSample {
		return 0
	}
	return s.cfg.DedicatedTrainers
}

// settleEvery is how often the settlement pass runs: a tenth of the delay,
// so that a component settles within 10% of it, between 50 ms and 30 s.
func settleEvery(after time.Duration) time.Duration {
	return min(max(after/10, 50*time.Millisecond), 30*time.Second)
}

// requestTimeout bounds one grain call.
const requestTimeout = 60 * time.Second

// reportWait bounds how long Stop waits for the grains to record the
// executors' last reports (a write each).
const reportWait = 10 * time.Second

// Store is the node's store (the HTTP layer reads keys from it).
func (s *System) Store() persistence.Store { return s.n.Store }

// Node is what the node's grains share: its store, router, reminders and
// executors (tests drive reminders and executors through it).
func (s *System) Node() *protocol.Node { return s.n }

// Grains counts the grains in memory on the node, by the kinds it hosts
// (operators see it at GET /admin/node; passivation empties it).
func (s *System) Grains() map[string]int {
	out := map[string]int{}
	for _, k := range []string{protocol.SessionKind, protocol.RunKind, protocol.SamplerKind} {
		if kind, ok := s.cluster.TryGetClusterKind(k); ok {
			out[k] = int(kind.Count())
		}
	}
	return out
}

// Telemetry is the node's Prometheus collectors.
func (s *System) Telemetry() *telemetry.Metrics { return s.cfg.Metrics }

// Registry is the node's providers.
func (s *System) Registry() *providers.Registry { return s.cfg.Registry }

// Stop lets the executing operation finish (until ctx ends; then it is
// cancelled and recorded so), then stops the actors and closes the store.
// Pending operations stay pending on disk and run after the next start.
func (s *System) Stop(ctx context.Context) {
	s.n.Reminders.Stop()
	s.mu.Lock()
	s.stopping = true // no more goroutines join wg
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); s.n.Trainer.Drain(ctx) }()
	go func() { defer both.Done(); s.samplers.Drain(ctx) }()
	both.Wait()
	s.n.Router.AwaitReports(reportWait)
	// Alone, the node has no identities to hand over (a graceful stop waits
	// 2 s for that); in a cluster it leaves, so that the others place its
	// grains at once rather than after finding it dead.
	s.cluster.Shutdown(s.cfg.Gossip != nil)
	s.n.Store.Close()
}

// membersLeft takes over, on this node, what members that left or died
// had in memory: their runs and samplers with work to do come back where
// the cluster now places them, and the leases they were timing are timed
// here (every node arms every lease; its grain checks the deadline).
func (s *System) membersLeft(evt any) {
	t, ok := evt.(*pcluster.ClusterTopology)
	if !ok || len(t.Left) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.n.Log.Info("members left: waking their grains", "left", len(t.Left))
		if err := s.wakeRuns(); err != nil {
			s.n.Log.Error("wake runs after members left", "err", err)
		}
		if err := s.armLeases(); err != nil {
			s.n.Log.Error("arm leases after members left", "err", err)
		}
	}()
}

// atLeast passes on records of level min and above: protoactor narrates its
// start-up and every activation at Info.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

// baseModel is the base model a grain needs its node to serve: its run's
// or sampler's ("" for a session, or a record not yet there).
func (s *System) baseModel(kind, id string) (string, error) {
	var model string
	err := s.n.Store.View(func(tx persistence.Tx) error {
		switch kind {
		case protocol.RunKind:
			var r persistence.Run
			_, err := tx.Get(persistence.Runs, []byte(id), &r)
			model = r.BaseModel
			return err
		case protocol.SamplerKind:
			var sm persistence.Sampler
			_, err := tx.Get(persistence.Samplers, []byte(id), &sm)
			model = sm.BaseModel
			return err
		}
		return nil
	})
	return model, err
}

// countLive counts, once, the live sessions and runs of a store from
// before their counts were kept in it (limits.Recount).
func (s *System) countLive() error {
	err := limits.Recount(s.n.Store, func(tx persistence.Tx) (map[string]*limits.Count, error) {
		counts := map[string]*limits.Count{}
		of := func(org string) *limits.Count {
			if counts[org] == nil {
				counts[org] = new(limits.Count)
			}
			return counts[org]
		}
		err := persistence.Each(tx, persistence.Runs, nil, nil, func(_ []byte, r *persistence.Run) (bool, error) {
			if !states.Terminal(states.RunMoves, r.Status) {
				of(r.Tenant.Org).Runs++
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		return counts, persistence.Each(tx, persistence.Sessions, nil, nil, func(_ []byte, ss *persistence.Session) (bool, error) {
			if !states.Terminal(states.SessionMoves, ss.Status) {
				of(ss.Tenant.Org).Sessions++
			}
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("count live sessions and runs: %w", err)
	}
	return nil
}

// wakeRuns activates every run that is not terminal, so that its grain
// recovers (interrupting what was executing) and runs its pending work.
func (s *System) wakeRuns() error {
	var ids []string
	err := s.n.Store.View(func(tx persistence.Tx) error {
		return persistence.Each(tx, persistence.Runs, nil, nil, func(_ []byte, r *persistence.Run) (bool, error) {
			if !states.Terminal(states.RunMoves, r.Status) {
				ids = append(ids, r.ID)
			}
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("scan runs: %w", err)
	}
	for _, id := range ids {
		if err := s.n.Run(id).Wake(); err != nil {
			return fmt.Errorf("wake run %s: %w", id, err)
		}
	}
	for _, id := range s.samplersIn(states.SamplerProvisioning, states.SamplerSyncing, states.SamplerReady) {
		if err := s.n.Sampler(id).Wake(); err != nil {
			return fmt.Errorf("wake sampler %s: %w", id, err)
		}
	}
	return nil
}

// samplersIn lists the samplers in one of statuses.
func (s *System) samplersIn(statuses ...string) []string {
	var ids []string
	err := s.n.Store.View(func(tx persistence.Tx) error {
		return persistence.Each(tx, persistence.Samplers, nil, nil, func(_ []byte, sm *persistence.Sampler) (bool, error) {
			if slices.Contains(statuses, sm.Status) {
				ids = append(ids, sm.ID)
			}
			return true, nil
		})
	})
	if err != nil {
		s.n.Log.Error("scan samplers", "err", err)
	}
	return ids
}

// legacyLease is the lease a session record held itself before leases were
// records of their own.
type legacyLease struct {
	Status    string    `msgpack:"status"`
	Epoch     int64     `msgpack:"lease_epoch"`
	ExpiresAt time.Time `msgpack:"lease_expires_at"`
	TTL       int64     `msgpack:"idle_ttl_s"`
}

// migrateLeases gives every session stored before leases were records of
// their own its lease record, from the fields its record still holds (a
// session no longer ready gets it revoked).
func migrateLeases(st persistence.Store) error {
	todo := map[string]lease.Lease{}
	err := st.View(func(tx persistence.Tx) error {
		return persistence.Each(tx, persistence.Sessions, nil, nil, func(k []byte, old *legacyLease) (bool, error) {
			if ok, err := tx.Get(persistence.Leases, k, &lease.Lease{}); err != nil || ok {
				return err == nil, err
			}
			todo[string(k)] = lease.Lease{Epoch: old.Epoch, ExpiresAt: old.ExpiresAt, TTLSeconds: old.TTL, Revoked: old.Status != states.SessionReady}
			return true, nil
		})
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	return st.Update(func(tx persistence.Tx) error {
		for id, l := range todo {
			if err := tx.Put(persistence.Leases, []byte(id), &l); err != nil {
				return err
			}
		}
		return nil
	})
}

// armLeases arms the expiry reminder of every lease that has not been
// revoked: reminders live in memory, their deadlines in the store.
func (s *System) armLeases() error {
	return s.n.Store.View(func(tx persistence.Tx) error {
		return persistence.Each(tx, persistence.Leases, nil, nil, func(k []byte, l *lease.Lease) (bool, error) {
			if !l.Revoked {
				s.n.Reminders.At(protocol.ReminderKey(protocol.SessionKind, string(k)), l.ExpiresAt)
			}
			return true, nil
		})
	})
}

// remind delivers a reminder ("kind/id", protocol.ReminderKey) to its
// grain, activating the grain if it is not in memory.
func (s *System) remind(key string) {
	kind, id, _ := strings.Cut(key, "/")
	if err := s.n.Remind(kind, id); err != nil {
		s.n.Log.Error("reminder", "grain", key, "err", err)
	}
}
