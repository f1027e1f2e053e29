// Package actors holds the service's grains (virtual actors: one per session
// and per run), the executor actor that runs the engine, and System, the
// node-local front door the HTTP layer calls.
//
// Every state change of a session or run goes through its grain, whose
// mailbox serialises it; reads go straight to the store, which holds only
// committed state. Messages to actors on other nodes are wire.Call
// envelopes with msgpack bodies; between actors of one node they are Go
// values (local).
package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/reminder"
	"github.com/wts-project/wts/actors/telemetry"
	"github.com/wts-project/wts/actors/wire"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/hub"
)

// Grain kinds.
const (
	sessionKind = "session"
	runKind     = "run"
)

// Config configures a node.
type Config struct {
	DataDir string // the store file and the run volume live here
	// SamplerIdle is how long a sampler may go unused before it releases
	// its adapter from memory (default 10 minutes).
	SamplerIdle time.Duration
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
	// DefaultLimits.
	Limits Limits
	// MemoryBudget bounds the bytes of trainers, samplers' adapters and KV
	// caches together (see memory); 0 is no bound.
	MemoryBudget int64
}

// System is one node: the actor system, its single-member cluster, the
// store and the executor.
type System struct {
	cfg        Config
	log        *slog.Logger
	store      *persistence.Store
	volume     persistence.Volume
	actors     *actor.ActorSystem
	cluster    *pcluster.Cluster
	executor   *actor.PID
	exec       *executor
	sampling   *actor.PID
	samplers   *samplingExecutor
	stop       chan struct{}
	wg         sync.WaitGroup
	facts      sync.Map   // run id → runFacts, for runs that can take work
	mergeMu    sync.Mutex // one merge of an artifact into its base model at a time
	vault      *persistence.Vault
	exportWake chan struct{} // tells the exporter there is work
	models     models
	adm        *admission
	mem        *memory
	// reminders wake grains at the deadlines they keep in the store: a
	// session's lease expiry, a sampler's idle release.
	reminders *reminder.Set
	// reports counts executors' reports sent and not yet handled by their
	// grains: Stop waits for them, so that an outcome (or a cut) recorded
	// during the drain reaches the store before it closes.
	reports atomic.Int64
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
	if cfg.HubEndpoint == "" {
		cfg.HubEndpoint = hub.DefaultEndpoint
	}
	if cfg.CredentialsKey == "" {
		cfg.CredentialsKey = persistence.SecretPath(cfg.DataDir, "credentials")
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.MemoryBudget <= 0 {
		cfg.MemoryBudget = math.MaxInt64 / 2
	}
	vault, err := persistence.OpenVault(cfg.CredentialsKey)
	if err != nil {
		return nil, err
	}
	st, err := persistence.Open(filepath.Join(cfg.DataDir, "wts.db"))
	if err != nil {
		return nil, err
	}
	st.OnCommit(cfg.Metrics.Commit)
	adm, mem := newAdmission(cfg.Limits), &memory{limit: cfg.MemoryBudget}
	cfg.Metrics.Gauge("wts_operations_queued", "Operations queued or executing on the node (bounded by --max-queue-node).",
		func() float64 { return float64(adm.queued().ops) })
	cfg.Metrics.Gauge("wts_operations_queued_bytes", "Bytes of queued operations' records held in memory (bounded by --max-queue-bytes).",
		func() float64 { return float64(adm.queued().bytes) })
	cfg.Metrics.Gauge("wts_memory_budget_used_bytes", "Memory taken by trainers, samplers' adapters and KV caches.",
		func() float64 { return float64(mem.inUse()) })
	cfg.Metrics.Gauge("wts_memory_budget_bytes", "The node's budget for trainers, samplers' adapters and KV caches.",
		func() float64 { return float64(mem.limit) })
	s := &System{cfg: cfg, log: cfg.Log, store: st, volume: persistence.NewVolume(cfg.DataDir), stop: make(chan struct{}),
		vault: vault, exportWake: make(chan struct{}, 1), adm: adm, mem: mem}
	s.reminders = reminder.New(s.now, s.remind)
	s.actors = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(atLeast{cfg.Log.Handler(), slog.LevelWarn}).With("component", "protoactor")
	}))
	pool := actor.WithDispatcher(newWorkerPool(workerIdle))
	props := func(a func() actor.Actor) *actor.Props { return actor.PropsFromProducer(a, pool) }
	s.exec = newExecutor(s)
	s.executor = s.actors.Root.Spawn(props(func() actor.Actor { return s.exec }))
	s.samplers = newSamplingExecutor(s)
	s.sampling = s.actors.Root.Spawn(props(func() actor.Actor { return s.samplers }))
	s.cluster, err = cluster.Start(s.actors, cluster.Config{Name: "wts", Host: "127.0.0.1", RequestTimeout: 60 * time.Second},
		pcluster.NewKind(sessionKind, props(func() actor.Actor { return &sessionGrain{grain: grain{sys: s}} })),
		pcluster.NewKind(runKind, props(func() actor.Actor { return &runGrain{opOwner: opOwner{grain: grain{sys: s}}} })),
		pcluster.NewKind(samplerKind, props(func() actor.Actor { return &samplerGrain{opOwner: opOwner{grain: grain{sys: s}}} })))
	if err != nil {
		st.Close()
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
	s.wg.Add(1)
	go s.exporter()
	return s, nil
}

// Store is the node's store (the HTTP layer reads keys from it).
func (s *System) Store() *persistence.Store { return s.store }

// Telemetry is the node's Prometheus collectors.
func (s *System) Telemetry() *telemetry.Metrics { return s.cfg.Metrics }

// Registry is the node's providers.
func (s *System) Registry() *providers.Registry { return s.cfg.Registry }

// Stop lets the executing operation finish (until ctx ends; then it is
// cancelled and recorded so), then stops the actors and closes the store.
// Pending operations stay pending on disk and run after the next start.
func (s *System) Stop(ctx context.Context) {
	s.reminders.Stop()
	close(s.stop)
	s.wg.Wait()
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); s.exec.drain(ctx) }()
	go func() { defer both.Done(); s.samplers.drain(ctx) }()
	both.Wait()
	s.awaitReports()
	s.cluster.Shutdown(false) // one member: no identities to hand over (graceful waits 2 s for that)
	s.store.Close()
}

// reportWait bounds how long Stop waits for the grains to record the
// executors' last reports (a write each).
const reportWait = 10 * time.Second

// awaitReports waits until the grains have handled every report sent.
func (s *System) awaitReports() {
	for deadline := time.Now().Add(reportWait); s.reports.Load() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.log.Error("stopping with executor reports unrecorded", "reports", s.reports.Load())
			return
		}
	}
}

// report sends an executor's report to a grain, counted until the grain
// has handled it (see reports).
func (s *System) report(kind, id, method string, msg any) {
	s.reports.Add(1)
	if !s.deliver(kind, id, &local{method: method, val: msg, counted: true}) {
		s.reports.Add(-1)
	}
}

func (s *System) now() time.Time { return s.cfg.Now().UTC() }

// call sends a request to the grain kind/id and puts its reply into resp.
// A grain active on this node gets req as a value (see local); one
// elsewhere, or not yet known here, gets it msgpack-encoded in a wire.Call.
func (s *System) call(kind, id, method string, req, resp any) error {
	if pid := s.localPID(kind, id); pid != nil {
		r, err := s.actors.Root.RequestFuture(pid, &local{method: method, val: req}, s.cluster.Config.RequestTimeoutTime).Result()
		if err != nil && !errors.Is(err, actor.ErrDeadLetter) {
			// No answer in time: the grain may still act on it, so it is
			// not sent again.
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("%s %s did not answer: %v", kind, id, err)}
		}
		if rep, ok := r.(*localReply); ok && err == nil {
			if rep.code != "" {
				return &Error{Code: rep.code, Message: rep.message}
			}
			if resp == nil || rep.val == nil {
				return nil
			}
			if err := assign(resp, rep.val); err != nil {
				return fmt.Errorf("%s reply: %w", method, err)
			}
			return nil
		}
		// The activation is gone: the cluster's own path below finds the
		// grain again.
		s.cluster.PidCache.RemoveByValue(id, kind, pid)
	}
	body, err := msgpack.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", method, err)
	}
	r, err := s.cluster.Request(id, kind, &wire.Call{Method: method, Body: body})
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("%s %s did not answer: %v", kind, id, err)}
	}
	rep, ok := r.(*wire.Reply)
	if !ok {
		return fmt.Errorf("%s: unexpected reply %T", method, r)
	}
	if rep.Code != "" {
		return &Error{Code: rep.Code, Message: rep.Message}
	}
	if resp == nil {
		return nil
	}
	if err := msgpack.Unmarshal(rep.Body, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", method, err)
	}
	return nil
}

// localPID is the grain kind/id's activation when the cluster has it on
// this node, nil when it is elsewhere or not yet looked up.
func (s *System) localPID(kind, id string) *actor.PID {
	pid, ok := s.cluster.PidCache.Get(id, kind)
	if !ok || pid.Address != s.actors.Address() {
		return nil
	}
	return pid
}

// tell sends a message to a grain without waiting for an answer. A grain
// the PID cache places on this node gets it at once; otherwise the cluster
// looks the grain up, a request to its placement actor that took 1.9% of
// the service's CPU at 64 clients when every executor report made one.
func (s *System) tell(kind, id, method string, msg any) {
	s.deliver(kind, id, &local{method: method, val: msg})
}

// notifyTries bounds how often notify sends one message.
const notifyTries = 5

// notify sends a message to a grain that may be passivating (a session, a
// sampler, an idle run) and must get it: unlike tell, it is a request whose
// answer it awaits on a goroutine of its own, so that one that reached an
// activation as it left (a dead letter, or dropped from its mailbox and so
// never answered) is sent again to the next activation. Its handlers are
// idempotent. What is lost when the node stops is recovered from the store
// at the next activation.
func (s *System) notify(kind, id, method string, v any) {
	go func() {
		for try := 1; ; try++ {
			select {
			case <-s.stop:
				return
			default:
			}
			err := s.call(kind, id, method, v, nil)
			if e := AsError(err); err == nil || e.Code != CodeUnavailable {
				if err != nil {
					s.log.Error("notify", "grain", kind+"/"+id, "method", method, "err", err)
				}
				return
			}
			if try == notifyTries {
				s.log.Error("notify: grain did not answer", "grain", kind+"/"+id, "method", method, "tries", try, "err", err)
				return
			}
		}
	}()
}

// deliver sends m to a grain (see tell) and reports whether it was sent as
// a local message, which the grain's receive then handles.
func (s *System) deliver(kind, id string, m *local) bool {
	if pid := s.localPID(kind, id); pid != nil {
		s.actors.Root.Send(pid, m)
		return true
	}
	pid := s.cluster.Get(id, kind)
	if pid == nil {
		s.log.Error("no activation for grain", "kind", kind, "id", id, "method", m.method)
		return false
	}
	if pid.Address == s.actors.Address() {
		s.actors.Root.Send(pid, m)
		return true
	}
	body, err := msgpack.Marshal(m.val)
	if err != nil {
		s.log.Error("encode message", "method", m.method, "err", err)
		return false
	}
	s.actors.Root.Send(pid, &wire.Call{Method: m.method, Body: body})
	return false
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

// toExecutor sends a command to this node's executor.
func (s *System) toExecutor(method string, msg any) { s.send(s.executor, method, msg) }

// send sends a command to an actor of this node (the executors).
func (s *System) send(pid *actor.PID, method string, msg any) {
	s.actors.Root.Send(pid, &local{method: method, val: msg})
}

// toSampling hands a job to the sampling executor.
func (s *System) toSampling(j *samplingJob) { s.send(s.sampling, "samp.job", j) }

// toSamplingCancel stops a sampling job at its next step.
func (s *System) toSamplingCancel(ref samplingRef) { s.send(s.sampling, "samp.cancel", ref) }

// toSamplingRelease drops a sampler's adapter from the sampling executor.
func (s *System) toSamplingRelease(samplerID string) {
	s.send(s.sampling, "samp.release", jobRef{RunID: samplerID})
}

// local is a message between actors of one node: its request travels as
// the Go value it is, where a wire.Call carries msgpack bytes. Encoding and
// decoding every message and reply was a ninth of the service's CPU at 64
// clients, and much of its garbage, for envelopes that never left the
// process. What a message or a reply holds belongs to its receiver from
// then on: senders build them fresh and keep no reference that they change.
type local struct {
	method  string
	val     any
	counted bool // an executor's report (System.report)
}

// localReply answers a local call: the handler's result, or its error's
// code and message.
type localReply struct {
	val           any
	code, message string
}

// msg is a request as its handler gets it: a value from this node (val) or
// msgpack bytes from another (body).
type msg struct {
	val  any
	body []byte
}

// request unpacks an actor's message: its method and request, and whether
// it came from this node. ok is false for messages that are not calls.
func request(m any) (method string, in msg, isLocal, ok bool) {
	switch c := m.(type) {
	case *local:
		return c.method, msg{val: c.val}, true, true
	case *wire.Call:
		return c.Method, msg{body: c.Body}, false, true
	}
	return "", msg{}, false, false
}

// handler answers one method of a grain.
type handler func(ctx actor.Context, in msg) (any, error)

// answer runs h and replies to the sender (if any) with its result, in the
// form the call came in.
func answer(ctx actor.Context, log *slog.Logger, method string, in msg, isLocal bool, h handler) {
	resp, err := h(ctx, in)
	if ctx.Sender() == nil {
		if err != nil {
			log.Error("message failed", "method", method, "err", err)
		}
		return
	}
	var code, message string
	if err != nil {
		e := AsError(err)
		if e.Code == CodeInternal {
			log.Error("request failed", "method", method, "err", err)
		}
		code, message = e.Code, e.Message
	}
	if isLocal {
		ctx.Respond(&localReply{val: resp, code: code, message: message})
		return
	}
	rep := &wire.Reply{Code: code, Message: message}
	if err == nil && resp != nil {
		if rep.Body, err = msgpack.Marshal(resp); err != nil {
			rep.Code, rep.Message = CodeInternal, "internal error"
			log.Error("encode reply", "method", method, "err", err)
		}
	}
	ctx.Respond(rep)
}

// decode is a handler's request as a *T: the value itself when the sender
// passed a T or *T on this node, else decoded from msgpack (a message from
// another node, or a value of another type, which goes through msgpack as
// it would between nodes).
func decode[T any](in msg) (*T, error) {
	switch v := in.val.(type) {
	case *T:
		return v, nil
	case T:
		return &v, nil
	case nil:
	default:
		body, err := msgpack.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		in.body = body
	}
	v := new(T)
	if err := msgpack.Unmarshal(in.body, v); err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	return v, nil
}

// assign puts a local reply's value into resp (a pointer): directly when
// the types agree, else through msgpack.
func assign(resp, val any) error {
	dst, v := reflect.ValueOf(resp).Elem(), reflect.ValueOf(val)
	switch {
	case v.Type() == dst.Type():
		dst.Set(v)
		return nil
	case v.Kind() == reflect.Pointer && v.Type().Elem() == dst.Type():
		if !v.IsNil() {
			dst.Set(v.Elem())
		}
		return nil
	}
	body, err := msgpack.Marshal(val)
	if err != nil {
		return err
	}
	return msgpack.Unmarshal(body, resp)
}

// wakeRuns activates every run that is not terminal, so that its grain
// recovers (interrupting what was executing) and runs its pending work.
func (s *System) wakeRuns() error {
	var ids []string
	err := s.store.View(func(tx *persistence.Tx) error {
		err := tx.Scan(persistence.Runs, nil, nil, func(_, raw []byte) (bool, error) {
			var r persistence.Run
			if err := persistence.Decode(raw, &r); err != nil {
				return false, err
			}
			if !Terminal(RunMoves, r.Status) {
				ids = append(ids, r.ID)
				s.adm.live[liveKey{r.Tenant.Org, runKind}]++
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		return tx.Scan(persistence.Sessions, nil, nil, func(_, raw []byte) (bool, error) {
			var ss persistence.Session
			if err := persistence.Decode(raw, &ss); err != nil {
				return false, err
			}
			if !Terminal(SessionMoves, ss.Status) {
				s.adm.live[liveKey{ss.Tenant.Org, sessionKind}]++
			}
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("scan runs and sessions: %w", err)
	}
	for _, id := range ids {
		if err := s.call(runKind, id, "run.wake", struct{}{}, nil); err != nil {
			return fmt.Errorf("wake run %s: %w", id, err)
		}
	}
	for _, id := range s.samplersIn(SamplerProvisioning, SamplerSyncing, SamplerReady) {
		if err := s.call(samplerKind, id, "sampler.wake", struct{}{}, nil); err != nil {
			return fmt.Errorf("wake sampler %s: %w", id, err)
		}
	}
	return nil
}

// samplersIn lists the samplers in one of statuses.
func (s *System) samplersIn(statuses ...string) []string {
	var ids []string
	err := s.store.View(func(tx *persistence.Tx) error {
		return tx.Scan(persistence.Samplers, nil, nil, func(_, raw []byte) (bool, error) {
			var sm persistence.Sampler
			if err := persistence.Decode(raw, &sm); err != nil {
				return false, err
			}
			if slices.Contains(statuses, sm.Status) {
				ids = append(ids, sm.ID)
			}
			return true, nil
		})
	})
	if err != nil {
		s.log.Error("scan samplers", "err", err)
	}
	return ids
}

// armLeases arms the expiry reminder of every lease that has not been
// revoked: reminders live in memory, their deadlines in the store.
func (s *System) armLeases() error {
	return s.store.View(func(tx *persistence.Tx) error {
		return tx.Scan(persistence.Leases, nil, nil, func(k, raw []byte) (bool, error) {
			var l lease.Lease
			if err := persistence.Decode(raw, &l); err != nil {
				return false, err
			}
			if !l.Revoked {
				s.reminders.At(sessionReminder(string(k)), l.ExpiresAt)
			}
			return true, nil
		})
	})
}

// remind delivers a reminder ("kind/id") to its grain's kind.remind,
// activating the grain if it is not in memory.
func (s *System) remind(key string) {
	kind, id, _ := strings.Cut(key, "/")
	if err := s.call(kind, id, kind+".remind", struct{}{}, nil); err != nil {
		s.log.Error("reminder", "grain", key, "err", err)
	}
}
