package executor

import "sync"

// inbox is an executor's queue of commands from the grains. A command that
// comes once the node has begun stopping is refused: the executor's actor
// can still be handed a grain's message after Stop closed the queue, and
// sending on the closed channel panicked.
type inbox[T any] struct {
	c      chan T
	mu     sync.RWMutex // held shared by senders, exclusively by close
	closed bool
}

func newInbox[T any](n int) *inbox[T] { return &inbox[T]{c: make(chan T, n)} }

// put queues v (waiting while the queue is full) and reports whether it
// was taken.
func (q *inbox[T]) put(v T) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	q.c <- v
	return true
}

// close ends the queue: the worker reads what was put, then sees it closed.
func (q *inbox[T]) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.c)
	}
}
