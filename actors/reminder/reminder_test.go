package reminder

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Reminders fire once each at their deadline, in order; re-arming moves a
// reminder, cancelling drops it, and Due fires what a moved clock has made
// due without waiting for the timer.
func TestReminders(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var mu sync.Mutex
	var fired []string
	got := make(chan string, 16)
	s := New(clock, func(k string) { mu.Lock(); fired = append(fired, k); mu.Unlock(); got <- k })
	defer s.Stop()

	now := clock()
	s.At("a", now.Add(30*time.Millisecond))
	s.At("b", now.Add(10*time.Millisecond))
	s.At("c", now.Add(time.Hour))
	s.At("d", now.Add(20*time.Millisecond))
	s.Cancel("d")
	for _, want := range []string{"b", "a"} {
		select {
		case k := <-got:
			if k != want {
				t.Fatalf("fired %s, want %s", k, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not fire", want)
		}
	}
	s.At("c", now.Add(2*time.Hour)) // moved later
	offset.Add(int64(90 * time.Minute))
	s.Due()
	select {
	case k := <-got:
		t.Fatalf("%s fired; c was moved past the clock", k)
	case <-time.After(50 * time.Millisecond):
	}
	offset.Add(int64(time.Hour))
	s.Due()
	if k := <-got; k != "c" {
		t.Fatalf("fired %s", k)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(fired) != 3 || s.Len() != 0 {
		t.Fatalf("fired %v, %d still armed", fired, s.Len())
	}
}
