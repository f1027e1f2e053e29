package persistence

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent writers share group commits; a writer whose function fails
// gets its error and leaves nothing behind, while the rest of its batch
// commits; everything acknowledged is there after a reopen.
func TestGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wts.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var commits, writes, pages atomic.Int64
	s.OnCommit(func(n, p int, _ time.Duration) { commits.Add(1); writes.Add(int64(n)); pages.Add(int64(p)) })
	refuse := errors.New("refused")
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(func(tx Tx) error {
				if err := tx.Put(Metrics, []byte(fmt.Sprint("k", i)), i); err != nil {
					return err
				}
				if i%7 == 0 {
					return refuse // after a write: it must be undone
				}
				return nil
			})
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c, w := commits.Load(), writes.Load(); c == 0 || w != n-(n+6)/7 || c > w {
		t.Errorf("%d commits carried %d writes, want %d", c, w, n-(n+6)/7)
	}
	if c, p := commits.Load(), pages.Load(); p < c { // a log page at least
		t.Errorf("%d commits wrote %d pages", c, p)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(func(tx Tx) error {
		for i := range n {
			var v int
			ok, err := tx.Get(Metrics, []byte(fmt.Sprint("k", i)), &v)
			if err != nil {
				return err
			}
			if refused := i%7 == 0; refused != errors.Is(errs[i], refuse) || ok == refused || ok && v != i {
				t.Errorf("writer %d: error %v, stored %v (%d)", i, errs[i], ok, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// Scan walks a prefix in key order from an exclusive start.
func TestScan(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(func(tx Tx) error {
		for _, run := range []string{"wtr_a", "wtr_b"} {
			for seq := int64(1); seq <= 5; seq++ {
				if err := tx.Put(Ops, SeqKey(run, seq), seq); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	err = s.View(func(tx Tx) error {
		return tx.Scan(Ops, []byte("wtr_a"), SeqKey("wtr_a", 2), func(_, raw []byte) (bool, error) {
			var seq int64
			if err := Decode(raw, &seq); err != nil {
				return false, err
			}
			got = append(got, seq)
			return len(got) < 2, nil
		})
	})
	if err != nil || fmt.Sprint(got) != "[3 4]" {
		t.Errorf("scan after seq 2, two items: %v %v", got, err)
	}
	s.Close()
	if err := s.Update(func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// A group waits for more writes only when given a gap (the commit loop gives
// one while writes come from several writers): then it takes those that
// come within the gap, until its deadline, and a gap with nothing in it
// ends the wait.
func TestGatherWaitsForCompany(t *testing.T) {
	s := &Local{queue: make(chan *write, 4)}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	first := &write{}
	s.queue <- &write{}
	if got := s.gather([]*write{first}, 0, time.Now().Add(time.Hour), timer); len(got) != 2 {
		t.Errorf("no gap: %d writes, want the 2 there were", len(got))
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		s.queue <- &write{}
	}()
	if got := s.gather([]*write{first}, time.Hour, time.Now().Add(500*time.Millisecond), timer); len(got) != 2 {
		t.Errorf("until the deadline: %d writes, want 2", len(got))
	}
	if got := s.gather([]*write{first}, 20*time.Millisecond, time.Now().Add(time.Hour), timer); len(got) != 1 {
		t.Errorf("an empty gap: %d writes, want 1", len(got))
	}
	close(s.queue)
	if got := s.gather([]*write{first}, time.Hour, time.Now().Add(time.Hour), timer); len(got) != 1 {
		t.Errorf("a closed queue: %d writes, want 1", len(got))
	}
}

// BenchmarkUpdate is the group commit under concurrent writers, each
// writing an operation-sized record (~300 bytes) at its own run's next key
// and a small head record, as an accepted submission does: writes/s, the
// mean group size, and the longest commit (one a checkpoint followed).
func BenchmarkUpdate(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers%d", writers), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "wts.db"))
			if err != nil {
				b.Fatal(err)
			}
			var commits, longest atomic.Int64
			s.OnCommit(func(_, _ int, took time.Duration) {
				commits.Add(1)
				if int64(took) > longest.Load() { // only the commit loop calls this
					longest.Store(int64(took))
				}
			})
			payload := make([]byte, 300)
			var next atomic.Int64
			b.SetParallelism((writers + 1) / 2) // RunParallel starts this × GOMAXPROCS
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				run := fmt.Sprintf("wtr_%d", next.Add(1))
				for seq := int64(1); pb.Next(); seq++ {
					err := s.Update(func(tx Tx) error {
						if err := tx.Put(Ops, SeqKey(run, seq), payload); err != nil {
							return err
						}
						return tx.Put(Heads, []byte(run), seq)
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(b.N)/float64(max(commits.Load(), 1)), "writes/commit")
			b.ReportMetric(time.Duration(longest.Load()).Seconds()*1000, "max-commit-ms")
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// The pages a checkpoint writes into the store file are reported with a
// group commit after it.
func TestCheckpointPagesReported(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var most atomic.Int64
	s.OnCommit(func(_, p int, _ time.Duration) {
		if int64(p) > most.Load() { // only the commit loop calls this
			most.Store(int64(p))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; most.Load() <= 1; i++ { // one log page a commit; an idle store checkpoints
		if time.Now().After(deadline) {
			t.Fatalf("no commit reported a checkpoint's pages (at most %d pages)", most.Load())
		}
		if err := s.Update(func(tx Tx) error { return tx.Put(Metrics, []byte(fmt.Sprint("k", i)), i) }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(checkpointIdle)
	}
}
