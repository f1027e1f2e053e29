package grain

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
)

// store is the counter grains' durable state, and counts activations.
type store struct {
	mu          sync.Mutex
	values      map[string]int
	activations map[string]int
}

// counter is a grain on Base: it activates from the store, adds, reads,
// and panics on request.
type counter struct {
	Base
	st  *store
	val int
}

func (c *counter) Receive(ctx actor.Context) {
	if c.Methods == nil {
		c.Methods = map[string]Handler{
			"add": func(_ actor.Context, in In) (any, error) {
				n, err := Decode[int](in)
				if err != nil {
					return nil, err
				}
				c.val += *n
				c.st.mu.Lock()
				c.st.values[c.ID] = c.val
				c.st.mu.Unlock()
				return c.val, nil
			},
			"boom": func(actor.Context, In) (any, error) { c.val = -1; panic("boom") },
		}
	}
	c.Handle(ctx, c.activate, nil)
}

func (c *counter) activate() error {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.activations[c.ID]++
	v, ok := c.st.values[c.ID]
	if !ok {
		return &Error{Code: "not_found", Message: c.ID + " not found"}
	}
	c.val = v
	return nil
}

func (s *store) activated(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activations[id]
}

// startCounters starts a member of one process hosting counter grains
// over st, which passivate after 30 ms idle, and their router.
func startCounters(t *testing.T, st *store) (*actor.ActorSystem, *pcluster.Cluster, *Router) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt := &Runtime{Log: quiet, Idle: 30 * time.Millisecond, Account: func(string, string, int, int64) {}}
	sys, c := startMember(t, nil, pcluster.NewKind("counter", actor.PropsFromProducer(func() actor.Actor {
		return &counter{Base: Base{RT: rt}, st: st}
	})))
	rt.Router = &Router{Actors: sys, Cluster: c, Log: quiet, Timeout: 5 * time.Second}
	return sys, c, rt.Router
}

// A grain on Base in one process: a failed activation is retried by the
// next call, a panic fails its call and the grain starts over from its
// durable state, and an idle grain passivates and comes back.
func TestBase(t *testing.T) {
	st := &store{values: map[string]int{}, activations: map[string]int{}}
	_, c, r := startCounters(t, st)
	defer c.Shutdown(false)

	if err := r.Call("counter", "a", "add", 1, nil); AsError(err).Code != "not_found" {
		t.Fatalf("a counter with no state: %v", err)
	}
	st.mu.Lock()
	st.values["a"] = 10
	st.mu.Unlock()
	var got int
	deadline := time.Now().Add(5 * time.Second)
	for err := r.Call("counter", "a", "add", 1, &got); err != nil; err = r.Call("counter", "a", "add", 1, &got) {
		if time.Now().After(deadline) {
			t.Fatalf("the failed activation stuck: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got != 11 {
		t.Fatalf("after a retried activation: %d", got)
	}

	before := st.activated("a")
	if err := r.Call("counter", "a", "boom", nil, nil); err == nil || !strings.Contains(err.Error(), "internal") {
		t.Fatalf("a panicking call: %v", err)
	}
	if err := r.Call("counter", "a", "add", 1, &got); err != nil || got != 12 || st.activated("a") != before+1 {
		t.Fatalf("after the panic: %d %v, %d activations (was %d)", got, err, st.activated("a"), before)
	}

	for deadline := time.Now().Add(5 * time.Second); c.GetClusterKind("counter").Count() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle grain did not passivate")
		}
	}
	before = st.activated("a")
	if err := r.Call("counter", "a", "add", 1, &got); err != nil || got != 13 || st.activated("a") != before+1 {
		t.Fatalf("after passivation: %d %v, %d activations (was %d)", got, err, st.activated("a"), before)
	}
}

// A grain that leaves (here, passivating) goes off the routes at once but
// stops only leaveGrace later: a call that reaches it meanwhile, holding
// its PID from before, is answered (try again) instead of dropped by the
// stopped mailbox, a message nobody waits for goes on to the grain's new
// activation, and calls through the router reach that one.
func TestLeavingActivationAnswers(t *testing.T) {
	st := &store{values: map[string]int{"b": 10}, activations: map[string]int{}}
	sys, c, r := startCounters(t, st)
	defer c.Shutdown(false)
	if err := r.Call("counter", "b", "add", 1, nil); err != nil {
		t.Fatal(err)
	}
	old := r.localPID("counter", "b")
	if old == nil {
		t.Fatal("no activation in the PID cache")
	}
	for deadline := time.Now().Add(5 * time.Second); r.localPID("counter", "b") != nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle grain did not leave")
		}
	}
	if _, alive := sys.ProcessRegistry.GetLocal(old.Id); !alive {
		t.Fatal("the activation stopped as it left")
	}
	v, err := sys.Root.RequestFuture(old, &Local{Method: "add", Val: 100}, time.Second).Result()
	if rep, ok := v.(*localReply); err != nil || !ok || rep.code != CodeUnavailable {
		t.Fatalf("a call to the leaving activation: %#v %v", v, err)
	}
	sys.Root.Send(old, &Local{Method: "add", Val: 5})
	var got int
	for deadline := time.Now().Add(5 * time.Second); got != 16; time.Sleep(5 * time.Millisecond) {
		if err := r.Call("counter", "b", "add", 0, &got); err != nil && AsError(err).Code != CodeUnavailable {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message to the leaving activation: %d, want 16", got)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, alive := sys.ProcessRegistry.GetLocal(old.Id); !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leaving activation did not stop")
		}
	}
}
