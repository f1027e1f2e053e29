// Package reminder holds a node's reminders: one-shot wake-ups keyed by
// grain, as Orleans' reminders are, that fire whether or not the grain is
// in memory (its handler activates it). Each grain re-arms its own at the
// deadline it keeps in the store, so nothing scans every record on a
// timer: a session's lease expiry and a sampler's idle release are each one
// reminder.
//
// The deadlines are read on the node's clock (tests move it and call Due);
// one timer waits for the earliest.
package reminder

import (
	"container/heap"
	"sync"
	"time"
)

// Set is a node's reminders.
type Set struct {
	now  func() time.Time
	fire func(key string)

	mu      sync.Mutex
	at      map[string]time.Time // key → its deadline
	queue   deadlines            // may hold stale entries, skipped when popped
	timer   *time.Timer
	stopped bool
}

// New makes a set whose reminders call fire with their key at their
// deadline on clock now (from the timer's goroutine, or Due's caller); fire
// must not block.
func New(now func() time.Time, fire func(key string)) *Set {
	s := &Set{now: now, fire: fire, at: map[string]time.Time{}}
	s.timer = time.AfterFunc(time.Hour, s.Due)
	s.timer.Stop()
	return s
}

// At arms key's reminder at deadline, replacing the one it had.
func (s *Set) At(key string, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.at[key] = deadline
	heap.Push(&s.queue, entry{key, deadline})
	s.arm()
}

// Cancel disarms key's reminder.
func (s *Set) Cancel(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, key)
}

// Len is the number of armed reminders.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// Due fires every reminder whose deadline has come and arms the timer for
// the next one.
func (s *Set) Due() {
	s.mu.Lock()
	var due []string
	now := s.now()
	for s.queue.Len() > 0 {
		e := s.queue[0]
		if at, ok := s.at[e.key]; !ok || !at.Equal(e.at) {
			heap.Pop(&s.queue) // disarmed or re-armed since
			continue
		}
		if e.at.After(now) {
			break
		}
		heap.Pop(&s.queue)
		delete(s.at, e.key)
		due = append(due, e.key)
	}
	if !s.stopped {
		s.arm()
	}
	s.mu.Unlock()
	for _, k := range due {
		s.fire(k)
	}
}

// Stop disarms every reminder; none fires after it returns.
func (s *Set) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.timer.Stop()
	s.at, s.queue = map[string]time.Time{}, nil
}

// arm sets the timer for the earliest deadline (under mu).
func (s *Set) arm() {
	for s.queue.Len() > 0 {
		e := s.queue[0]
		if at, ok := s.at[e.key]; ok && at.Equal(e.at) {
			s.timer.Reset(max(e.at.Sub(s.now()), 0))
			return
		}
		heap.Pop(&s.queue)
	}
	s.timer.Stop()
}

type entry struct {
	key string
	at  time.Time
}

// deadlines is a min-heap of entries by deadline.
type deadlines []entry

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(entry)) }
func (d *deadlines) Pop() any {
	old := *d
	e := old[len(old)-1]
	*d = old[:len(old)-1]
	return e
}
