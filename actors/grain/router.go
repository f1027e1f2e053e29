package grain

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/wts-project/wts/actors/wire"
	"github.com/wts-project/wts/cluster"
)

// Router sends messages to grains, wherever they are: a grain active on
// this node gets the Go value (Local), one elsewhere (or not yet known
// here) gets it msgpack-encoded in a wire.Call through protoactor's
// cluster. Wire makes it encode every message, local ones included: the
// test mode that drives the remote path through every test.
type Router struct {
	Actors  *actor.ActorSystem
	Cluster *pcluster.Cluster
	Log     *slog.Logger
	Timeout time.Duration // one call's answer
	Wire    bool
	// Stop, when closed, ends Notify's retries.
	Stop <-chan struct{}

	// reports counts executors' reports sent and not yet handled by their
	// grains (see Report).
	reports atomic.Int64
	members departures
}

// callTries bounds how often one call is sent: again when its activation
// was gone (a dead letter: it passivated) or its member left the cluster.
const callTries = 3

// request sends msg to the grain kind/id wherever the cluster places it
// and waits for its answer, as protoactor's cluster request does, but a
// call to a member that leaves the cluster (or is found dead) meanwhile
// is sent again at once to the grain's next placement instead of waiting
// out the timeout. Grains drop what they are sent twice (seq_id,
// idempotency key), since the first may have been handled.
func (r *Router) request(id, kind string, msg any) (any, error) {
	deadline := time.Now().Add(r.Timeout)
	var err error
	for try := 0; try < callTries && time.Now().Before(deadline); try++ {
		pid, ok := r.Cluster.PidCache.Get(id, kind)
		if !ok {
			// The identity lookup; the cache then serves this call's
			// successors (localPID among them) until the activation goes.
			if pid = r.Cluster.Get(id, kind); pid == nil {
				err = fmt.Errorf("no activation")
				time.Sleep(50 * time.Millisecond)
				continue
			}
			r.Cluster.PidCache.Set(id, kind, pid)
		}
		left := r.members.watch(pid.Address)
		fut := r.Actors.Root.RequestFuture(pid, msg, time.Until(deadline))
		type answer struct {
			v   any
			err error
		}
		got := make(chan answer, 1)
		go func() { v, err := fut.Result(); got <- answer{v, err} }()
		select {
		case a := <-got:
			if a.err == nil {
				return a.v, nil
			}
			err = a.err
			if !errors.Is(a.err, actor.ErrDeadLetter) && !errors.Is(a.err, remote.ErrDeadLetter) {
				return nil, err
			}
		case <-left:
			err = fmt.Errorf("member %s left", pid.Address)
		}
		r.Cluster.PidCache.RemoveByValue(id, kind, pid)
	}
	return nil, err
}

// Watch follows the cluster's topology, so that calls to members that
// leave are sent elsewhere (request). Call once the cluster runs.
func (r *Router) Watch() {
	r.Actors.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pcluster.ClusterTopology); ok {
			for _, m := range t.Joined {
				r.members.joined(m.Address())
			}
			for _, m := range t.Left {
				r.members.left(m.Address())
			}
		}
	})
}

// departures tells callers when the member at an address leaves.
type departures struct {
	mu   sync.Mutex
	gone map[string]chan struct{} // by address: closed once it has left
}

// watch is closed when the member at addr leaves (at once if it has).
func (d *departures) watch(addr string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.of(addr)
}

// of is addr's channel (d.mu held).
func (d *departures) of(addr string) chan struct{} {
	if d.gone == nil {
		d.gone = map[string]chan struct{}{}
	}
	c, ok := d.gone[addr]
	if !ok {
		c = make(chan struct{})
		d.gone[addr] = c
	}
	return c
}

func (d *departures) left(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.of(addr)
	select {
	case <-c:
	default:
		close(c)
	}
}

// joined forgets that addr left: a node that restarts may come back on the
// same address.
func (d *departures) joined(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.gone[addr]; ok {
		select {
		case <-c:
			delete(d.gone, addr)
		default:
		}
	}
}

// Call sends a request to the grain kind/id and puts its reply into resp
// (nil: the reply is dropped). A refusal comes back as the handler's
// *Error; no answer in time is CodeUnavailable, and the grain may still act
// on the request, so it is not sent again.
func (r *Router) Call(kind, id, method string, req, resp any) error {
	if pid := r.localPID(kind, id); pid != nil && !r.Wire {
		v, err := r.Actors.Root.RequestFuture(pid, &Local{Method: method, Val: req}, r.Timeout).Result()
		if err != nil && !errors.Is(err, actor.ErrDeadLetter) {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("%s %s did not answer: %v", kind, id, err)}
		}
		if rep, ok := v.(*localReply); ok && err == nil {
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
		// The activation is gone (it passivated): the cluster's own path
		// below finds the grain again, activating it.
		r.Cluster.PidCache.RemoveByValue(id, kind, pid)
	}
	body, err := msgpack.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", method, err)
	}
	v, err := r.request(id, kind, &wire.Call{Method: method, Body: body})
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("%s %s did not answer: %v", kind, id, err)}
	}
	rep, ok := v.(*wire.Reply)
	if !ok {
		return fmt.Errorf("%s: unexpected reply %T", method, v)
	}
	if rep.Code != "" {
		if rep.Code == CodeUnavailable {
			// The activation may be leaving (Base.leave): the next call
			// looks the grain up again rather than reach it.
			r.Cluster.PidCache.Remove(id, kind)
		}
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

// Ask is Call with a reply of type T.
func Ask[T any](r *Router, kind, id, method string, req any) (*T, error) {
	var out T
	return &out, r.Call(kind, id, method, req, &out)
}

// localPID is the grain kind/id's activation when the cluster has it on
// this node, nil when it is elsewhere or not yet looked up.
func (r *Router) localPID(kind, id string) *actor.PID {
	pid, ok := r.Cluster.PidCache.Get(id, kind)
	if !ok || pid.Address != r.Actors.Address() {
		return nil
	}
	return pid
}

// Leave takes pid, an activation of grain kind/id on this node, off the
// routes to its grain (cluster.Leave).
func (r *Router) Leave(kind, id string, pid *actor.PID) {
	if r.Cluster != nil {
		cluster.Leave(r.Cluster, kind, id, pid)
	}
}

// Tell sends a message to a grain without waiting for an answer. A grain
// the PID cache places on this node gets it at once; otherwise the cluster
// looks the grain up (a request to its placement actor, which showed in the
// API benchmark's profiles when every executor report made one).
func (r *Router) Tell(kind, id, method string, msg any) {
	r.deliver(kind, id, &Local{Method: method, Val: msg})
}

// deliver sends m to a grain (see Tell) and reports whether it was sent as
// a Local message, which the grain's receive then handles.
func (r *Router) deliver(kind, id string, m *Local) bool {
	pid := r.resolve(kind, id, m.Method)
	if pid == nil {
		return false
	}
	if pid.Address == r.Actors.Address() && !r.Wire {
		r.Actors.Root.Send(pid, m)
		return true
	}
	body, err := msgpack.Marshal(m.Val)
	if err != nil {
		r.Log.Error("encode message", "method", m.Method, "err", err)
		return false
	}
	r.Actors.Root.Send(pid, &wire.Call{Method: m.Method, Body: body})
	return false
}

// resolve is the PID of grain kind/id's activation for a message nobody
// waits for (nil, logged, when there is none).
func (r *Router) resolve(kind, id, method string) *actor.PID {
	if r.Cluster == nil { // the node is still starting: no grain can be reached
		r.Log.Error("message before the cluster started", "kind", kind, "id", id, "method", method)
		return nil
	}
	pid := r.localPID(kind, id)
	if pid == nil {
		if pid = r.Cluster.Get(id, kind); pid == nil {
			r.Log.Error("no activation for grain", "kind", kind, "id", id, "method", method)
			return nil
		}
		r.Cluster.PidCache.Set(id, kind, pid)
	}
	return pid
}

// forward sends m, a message nobody waits for that reached an activation
// of grain kind/id after it left (Base.leave), on to the grain's
// activation now; a counted report stays counted.
func (r *Router) forward(kind, id string, m any) {
	switch c := m.(type) {
	case *Local:
		r.deliverCounted(kind, id, c)
	case *wire.Call:
		if pid := r.resolve(kind, id, c.Method); pid != nil {
			r.Actors.Root.Send(pid, c)
		}
	}
}

// Send sends a command to an actor of this node (an executor).
func (r *Router) Send(pid *actor.PID, method string, msg any) {
	if !r.Wire {
		r.Actors.Root.Send(pid, &Local{Method: method, Val: msg})
		return
	}
	body, err := msgpack.Marshal(msg)
	if err != nil {
		r.Log.Error("encode message", "method", method, "err", err)
		return
	}
	r.Actors.Root.Send(pid, &wire.Call{Method: method, Body: body})
}

// Report sends an executor's report to a grain. One whose grain is active
// on this node goes at once, counted until the grain has handled it
// (Handled): AwaitReports waits for them, so that an outcome recorded
// while the node drains reaches the store before it closes. One whose
// grain lives elsewhere (it moved while the job ran) is sent as Notify
// does, again until an activation has it: a report lost to an activation
// that went would leave its grain waiting for good.
func (r *Router) Report(kind, id, method string, msg any) {
	if r.Cluster != nil && (r.Wire || r.localPID(kind, id) == nil) {
		r.Notify(kind, id, method, msg)
		return
	}
	r.deliverCounted(kind, id, &Local{Method: method, Val: msg, Counted: true})
}

// deliverCounted is deliver, m counted until its grain has handled it
// when m.Counted (Handled); it is not counted if it went as a wire call,
// which the grain does not count.
func (r *Router) deliverCounted(kind, id string, m *Local) {
	if m.Counted {
		r.reports.Add(1)
	}
	if !r.deliver(kind, id, m) && m.Counted {
		r.reports.Add(-1)
	}
}

// Handled counts one report handled by its grain.
func (r *Router) Handled() { r.reports.Add(-1) }

// AwaitReports waits (up to wait) until the grains have handled every
// report sent.
func (r *Router) AwaitReports(wait time.Duration) {
	for deadline := time.Now().Add(wait); r.reports.Load() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.Log.Error("stopping with executor reports unrecorded", "reports", r.reports.Load())
			return
		}
	}
}

// notifyTries bounds how often Notify sends one message.
const notifyTries = 5

// Notify sends a message to a grain that may be passivating and must get
// it: unlike Tell, it is a request whose answer it awaits on a goroutine
// of its own, so that one that reached an activation as it left (a dead
// letter, or dropped from its mailbox and so never answered) is sent again
// to the next activation. Its handlers must be idempotent. What is lost
// when the node stops must be recovered from the store at the next
// activation.
func (r *Router) Notify(kind, id, method string, v any) {
	go func() {
		for try := 1; ; try++ {
			select {
			case <-r.Stop:
				return
			default:
			}
			err := r.Call(kind, id, method, v, nil)
			if e := AsError(err); err == nil || e.Code != CodeUnavailable {
				if err != nil {
					r.Log.Error("notify", "grain", kind+"/"+id, "method", method, "err", err)
				}
				return
			}
			if try == notifyTries {
				r.Log.Error("notify: grain did not answer", "grain", kind+"/"+id, "method", method, "tries", try, "err", err)
				return
			}
		}
	}()
}
