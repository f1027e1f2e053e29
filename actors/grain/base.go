package grain

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
)

// Runtime is what a node's grains share.
type Runtime struct {
	Router *Router
	Log    *slog.Logger
	// Idle is how long a grain with nothing in flight stays in memory after
	// its last message before it passivates.
	Idle time.Duration
	// Account is told each grain's queued work after every message it
	// handles (admission control's per-organization and node totals).
	Account func(id, org string, ops int, bytes int64)
}

// Base is what every grain embeds: its identity, its activation's failure
// and its handler table. Handle drives its life: activation, calls, a
// panic's recovery, passivation.
type Base struct {
	RT      *Runtime
	ID      string
	Err     error              // activation failure, answered to every call
	Methods map[string]Handler // by method name
	// Load, when set, is the grain's queued work, reported to Account after
	// every message it handles.
	Load func() (org string, ops int, bytes int64)
	// Idle, when set, says whether the grain holds nothing that is not in
	// the store and awaits no report, so that it may passivate; unset, it
	// always may.
	Idle func() bool

	// last is when the grain last handled a message; idleTimer checks,
	// Runtime.Idle after it, whether the grain may passivate (protoactor's
	// ReceiveTimeout races with the mailbox: protoactor-go#1139).
	last      time.Time
	idleTimer *time.Timer
	kind      string
	// leaveTimer stops the activation leaveGrace after it left (leave).
	leaveTimer *time.Timer
}

// leaveGrace is how long an activation that left its grain's routes keeps
// answering (with its failure, or ErrLeaving) before it stops: a call
// that found it just before it left still gets an answer, where the
// stopped activation's mailbox would drop it unanswered.
const leaveGrace = time.Second

// ErrLeaving answers a call that reaches an activation after it left
// (passivating): the call changed nothing, and the next one reaches the
// grain's new activation.
var ErrLeaving = &Error{Code: CodeUnavailable, Message: "this resource was passivating; try again"}

// idleCheck is the grain's own message that its idle timer fired.
type idleCheck struct{}

// Handle is a grain's Receive: on activation it recovers (activate) and
// moves on (resume, if any); a call goes to its method's handler, or is
// answered with the activation's failure. An activation that failed
// answers the next call with its failure, then leaves, so that the call
// after it tries again (leaving at once would race the call that
// activated it, which would then find no activation, again and again). A
// handler that panics fails its call, and the grain starts over from its
// durable state; so does one that fails, for a reason other than a
// refusal, on a message nobody waits for. One fenced by a newer activation
// of its grain leaves (ErrFenced). Leaving, it first goes off the routes,
// then stops leaveGrace later (leave).
func (b *Base) Handle(ctx actor.Context, activate func() error, resume func()) {
	switch m := ctx.Message().(type) {
	case *pcluster.ClusterInit:
		b.ID, b.kind = m.Identity.Identity, m.Identity.Kind
		if b.Err = activate(); b.Err == nil && resume != nil {
			resume()
		}
		b.account()
		b.last = time.Now()
		b.passivateIfIdle(ctx)
	case idleCheck:
		b.passivateIfIdle(ctx)
	case *actor.Stopped:
		for _, t := range []*time.Timer{b.idleTimer, b.leaveTimer} {
			if t != nil {
				t.Stop()
			}
		}
	default:
		b.last = time.Now()
		defer b.account()
		if l, ok := m.(*Local); ok && l.Counted {
			defer b.RT.Router.Handled()
		}
		method, in, isLocal, ok := Request(m)
		if !ok {
			return
		}
		if b.leaveTimer != nil && ctx.Sender() == nil {
			// Left, and nobody waits for an answer to this message (a
			// report, a wake-up): it goes on to the grain's activation now.
			b.RT.Router.forward(b.kind, b.ID, m)
			return
		}
		h := b.Methods[method]
		switch {
		case b.Err != nil:
			h = func(actor.Context, In) (any, error) { return nil, b.Err }
		case h == nil:
			h = func(actor.Context, In) (any, error) { return nil, fmt.Errorf("unknown method %q", method) }
		}
		Answer(ctx, b.RT.Log, method, in, isLocal, func(ctx actor.Context, in In) (resp any, err error) {
			err = Guard(b.RT.Log, "grain "+method, func() (err error) {
				resp, err = h(ctx, in)
				return err
			})
			var refusal *Error
			if errors.Is(err, ErrFenced) {
				// A newer activation holds the lease: what this one holds
				// is stale. It answers every call so (try again) and leaves.
				b.RT.Log.Info("grain fenced by a newer activation: leaving", "id", b.ID, "method", method)
				b.Err = ErrFenced
				return resp, err
			}
			if errors.Is(err, ErrPanic) || (err != nil && ctx.Sender() == nil && !errors.As(err, &refusal)) {
				// What the grain holds in memory may be half-changed (a
				// panic), or out of step with what it was told and could
				// not record (a report whose write failed, which nobody
				// will send again): it starts over from its durable state,
				// as after a restart.
				if b.Err = activate(); b.Err == nil && resume != nil {
					resume()
				}
			}
			return resp, err
		})
		if b.Err != nil {
			b.leave(ctx)
		}
	}
}

// leave takes the activation off its grain's routes (cluster.Leave) and
// stops it leaveGrace later; meanwhile it answers every call with b.Err
// and forwards every message nobody waits for (Router.forward).
func (b *Base) leave(ctx actor.Context) {
	if b.leaveTimer != nil {
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	b.RT.Router.Leave(b.kind, b.ID, self)
	b.leaveTimer = time.AfterFunc(leaveGrace, func() { root.Poison(self) })
}

// passivateIfIdle passivates a grain that has had no message for
// Runtime.Idle and holds nothing in flight; otherwise it checks again when
// it next could be.
func (b *Base) passivateIfIdle(ctx actor.Context) {
	wait := b.RT.Idle - time.Since(b.last)
	if wait <= 0 && (b.Err != nil || b.Idle == nil || b.Idle()) {
		if b.Err == nil {
			b.Err = ErrLeaving
		}
		b.leave(ctx) // its queued work, none, is already accounted
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	b.idleTimer = time.AfterFunc(max(wait, b.RT.Idle), func() { root.Send(self, idleCheck{}) })
}

// account reports the grain's queued work.
func (b *Base) account() {
	if b.Load != nil && b.Err == nil && b.ID != "" { // activated (Started comes before ClusterInit)
		org, ops, bytes := b.Load()
		b.RT.Account(b.ID, org, ops, bytes)
	}
}
