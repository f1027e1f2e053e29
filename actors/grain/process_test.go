package grain

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/wts-project/wts/cluster"
)

// say is the echo grain's request, with the kinds of fields the service's
// messages carry.
type say struct {
	Text  string
	At    time.Time
	Body  []byte
	Count map[string]int64
	Ptr   *int64
}

// said is its reply: the request as the grain saw it, and who answered.
type said struct {
	Got  say
	Pid  int
	Told []string
}

// echoGrain answers in another process: it returns what it got, refuses
// on request, and keeps what it was told.
type echoGrain struct{ told []string }

func (g *echoGrain) Receive(ctx actor.Context) {
	method, in, isLocal, ok := Request(ctx.Message())
	if !ok {
		return
	}
	Answer(ctx, slog.Default(), method, in, isLocal, func(_ actor.Context, in In) (any, error) {
		switch method {
		case "echo.say":
			s, err := Decode[say](in)
			if err != nil {
				return nil, err
			}
			return &said{Got: *s, Pid: os.Getpid(), Told: g.told}, nil
		case "echo.tell":
			s, err := Decode[string](in)
			if err != nil {
				return nil, err
			}
			g.told = append(g.told, *s)
			return nil, nil
		case "echo.refuse":
			return nil, &Error{Code: "validation_error", Message: "refused in process " + strconv.Itoa(os.Getpid())}
		}
		return nil, fmt.Errorf("unknown method %q", method)
	})
}

// startMember starts an actor system in this process as a cluster member
// hosting kinds, with peers.
func startMember(t testing.TB, peers []*pcluster.Member, kinds ...*pcluster.Kind) (*actor.ActorSystem, *pcluster.Cluster) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	c, err := cluster.Start(sys, cluster.Config{Name: "grain-test", Host: "127.0.0.1", RequestTimeout: 5 * time.Second, Peers: peers}, kinds...)
	if err != nil {
		t.Fatal(err)
	}
	return sys, c
}

// The remote path crosses a process: a grain hosted by a child process is
// called from this one through protoactor's remote, its request and reply
// msgpack bodies in wire envelopes, a refusal's code and message intact,
// and a Tell arrives before the Call sent after it.
func TestTwoProcesses(t *testing.T) {
	if os.Getenv("WTS_GRAIN_CHILD") == "1" {
		serveChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoProcesses$")
	cmd.Env = append(os.Environ(), "WTS_GRAIN_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child serves until its input ends
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Error("the child did not stop")
		}
	}()
	lines := bufio.NewScanner(stdout)
	var child *pcluster.Member
	deadline := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 4 && f[0] == "member" {
			port, _ := strconv.Atoi(f[3])
			child = &pcluster.Member{Id: f[1], Host: f[2], Port: int32(port), Kinds: []string{"echo"}}
			break
		}
	}
	if child == nil {
		t.Fatal("the child did not announce itself")
	}

	sys, c := startMember(t, []*pcluster.Member{child})
	defer c.Shutdown(false)
	r := &Router{Actors: sys, Cluster: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: 5 * time.Second}
	n := int64(-7)
	req := say{Text: "über", At: time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC), Body: []byte{0, 1, 255}, Count: map[string]int64{"a": 1 << 40}, Ptr: &n}
	r.Tell("echo", "g1", "echo.tell", "first")
	var got said
	if err := r.Call("echo", "g1", "echo.say", req, &got); err != nil {
		t.Fatal(err)
	}
	if got.Pid == os.Getpid() || got.Pid == 0 {
		t.Fatalf("answered by process %d (this is %d)", got.Pid, os.Getpid())
	}
	g := got.Got
	if g.Text != req.Text || !g.At.Equal(req.At) || string(g.Body) != string(req.Body) || g.Count["a"] != 1<<40 || g.Ptr == nil || *g.Ptr != n {
		t.Fatalf("the request came back as %+v", g)
	}
	if len(got.Told) != 1 || got.Told[0] != "first" {
		t.Fatalf("the tell before the call: %v", got.Told)
	}
	err = r.Call("echo", "g1", "echo.refuse", struct{}{}, nil)
	if e := AsError(err); e.Code != "validation_error" || !strings.Contains(e.Message, strconv.Itoa(got.Pid)) {
		t.Fatalf("the refusal: %v", err)
	}
}

// serveChild is the child process: it hosts the echo kind, prints its
// member line, and serves until its input ends.
func serveChild(t *testing.T) {
	_, c := startMember(t, nil, pcluster.NewKind("echo", actor.PropsFromProducer(func() actor.Actor { return &echoGrain{} })))
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("member %s %s %d\n", c.ActorSystem.ID, host, port)
	io.Copy(io.Discard, os.Stdin)
	c.Shutdown(false)
}
