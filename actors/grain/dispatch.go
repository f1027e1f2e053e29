package grain

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workerPool is the dispatcher this node's actors run their mailboxes on.
// protoactor's default starts a goroutine for every run of a mailbox, so
// each batch of a grain's messages began on a fresh stack and grew it
// (copying stacks showed in bench/apibench's CPU profiles; commit c4135ba has them).
// A worker here keeps its grown stack for the next mailbox. One starts whenever none is idle, so a
// mailbox waiting on another actor never holds up a second one; one that
// stays idle for the pool's idle time ends.
type workerPool struct {
	work chan func() // unbuffered: a send succeeds only into an idle worker
	idle time.Duration
}

// mailboxThroughput is how many messages a mailbox runs before it yields
// its worker: protoactor's default.
const mailboxThroughput = 300

// workerIdle is how long an idle worker of the node's pool waits for a
// mailbox before it ends.
const workerIdle = 10 * time.Second

// Dispatcher is the node's mailbox dispatcher: a pool of workers that keep
// their grown stacks (see workerPool).
func Dispatcher() actor.Dispatcher { return newWorkerPool(workerIdle) }

var _ actor.Dispatcher = (*workerPool)(nil)

func newWorkerPool(idle time.Duration) *workerPool {
	return &workerPool{work: make(chan func()), idle: idle}
}

// Schedule runs fn on an idle worker, or on a new one.
func (p *workerPool) Schedule(fn func()) {
	select {
	case p.work <- fn:
	default:
		go p.worker(fn)
	}
}

func (p *workerPool) Throughput() int { return mailboxThroughput }

func (p *workerPool) worker(fn func()) {
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(p.idle)
		select {
		case fn = <-p.work:
		case <-idle.C:
			return
		}
	}
}
