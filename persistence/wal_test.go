package persistence

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// crash stops s as a killed process would: no checkpoint, nothing flushed
// beyond what each acknowledged write already synced.
func crash(t *testing.T, s *Local) {
	t.Helper()
	s.mu.Lock()
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	if s.ckpt != nil { // let a running checkpoint land or not: it syncs either way
		<-s.ckpt
	}
	s.closeLogs()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// model is what the store must hold: bucket → key → value.
type model map[Bucket]map[string]int64

func (m model) put(b Bucket, k string, v int64) {
	if m[b] == nil {
		m[b] = map[string]int64{}
	}
	m[b][k] = v
}

// scanModel is Scan's contract on the model.
func (m model) scan(b Bucket, prefix, from string, limit int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m[b])) {
		if strings.HasPrefix(k, prefix) && (from == "" || k > from) && len(out) < limit {
			out = append(out, fmt.Sprintf("%s=%d", k, m[b][k]))
		}
	}
	return out
}

func scanStore(tx Tx, b Bucket, prefix, from string, limit int) ([]string, error) {
	var out []string
	var f []byte
	if from != "" {
		f = []byte(from)
	}
	err := tx.Scan(b, []byte(prefix), f, func(k, raw []byte) (bool, error) {
		var v int64
		if err := Decode(raw, &v); err != nil {
			return false, err
		}
		out = append(out, fmt.Sprintf("%s=%d", k, v))
		return len(out) < limit, nil
	})
	return out, err
}

// checkModel reads every key (directly and through memos, which live from
// one call to the next and across reopens) and a few scans through View
// and compares them with the model.
func checkModel(t *testing.T, s *Local, m model, memos map[string]*Memo[int64], r *rand.Rand, when string) {
	t.Helper()
	err := s.View(func(tx Tx) error {
		for _, b := range []Bucket{Ops, Metrics} {
			for i := range 40 {
				k := fmt.Sprintf("r%d/%02d", i%3, i)
				var v int64
				ok, err := tx.Get(b, []byte(k), &v)
				if err != nil {
					return err
				}
				want, wok := m[b][k]
				if ok != wok || v != want {
					t.Fatalf("%s: %s/%s = %v %d, want %v %d", when, b, k, ok, v, wok, want)
				}
				memo := memos[string(b)+k]
				if memo == nil {
					memo = new(Memo[int64])
					memos[string(b)+k] = memo
				}
				if v, ok, err = memo.Get(tx, b, []byte(k)); err != nil {
					return err
				}
				if ok != wok || v != want {
					t.Fatalf("%s: %s/%s through its memo = %v %d, want %v %d", when, b, k, ok, v, wok, want)
				}
			}
			for range 6 {
				prefix := fmt.Sprintf("r%d", r.IntN(3))
				from := ""
				if r.IntN(2) == 0 {
					from = fmt.Sprintf("%s/%02d", prefix, r.IntN(40))
				}
				limit := 1 + r.IntN(20)
				got, err := scanStore(tx, b, prefix, from, limit)
				if err != nil {
					return err
				}
				if want := m.scan(b, prefix, from, limit); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: scan %s %q after %q: %v, want %v", when, b, prefix, from, got, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
}

// Random writes in random groups, with checkpoints every few dozen entries,
// refused writers, clean closes and crashes: every read and scan agrees with
// a plain map of the acknowledged writes, inside writers (which see their
// own and their group's earlier writes), in View (also through memos that
// outlive checkpoints and reopens), and after each reopen.
func TestStoreMatchesModel(t *testing.T) {
	defer func(n int) { checkpointEntries = n }(checkpointEntries)
	checkpointEntries = 37
	path := filepath.Join(t.TempDir(), "wts.db")
	r := rand.New(rand.NewPCG(11, 0))
	m := model{}
	memos := map[string]*Memo[int64]{}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 30 {
		// A group: writers started together; each changes a few keys of
		// its own (distinct per writer, so the model does not depend on
		// the order the group runs them in) and checks what it reads.
		var wg sync.WaitGroup
		var mu sync.Mutex               // guards m against the writers
		for w := range 1 + r.IntN(10) { // keys w*4+j: distinct, under 40
			type change struct {
				b   Bucket
				k   string
				v   int64
				del bool
			}
			var cs []change
			for j := range 1 + r.IntN(4) {
				b := []Bucket{Ops, Metrics}[r.IntN(2)]
				i := (w*4 + j) % 40
				cs = append(cs, change{b, fmt.Sprintf("r%d/%02d", i%3, i), int64(round*1000 + w*10 + j), r.IntN(5) == 0})
			}
			refuse := r.IntN(6) == 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.Update(func(tx Tx) error {
					for _, c := range cs {
						var err error
						if c.del {
							err = tx.Delete(c.b, []byte(c.k))
						} else {
							err = tx.Put(c.b, []byte(c.k), c.v)
						}
						if err != nil {
							return err
						}
						var v int64
						ok, err := tx.Get(c.b, []byte(c.k), &v)
						if err != nil || ok == c.del || ok && v != c.v {
							return fmt.Errorf("read own write %s/%s: %v %d %v", c.b, c.k, ok, v, err)
						}
					}
					if refuse {
						return errRefused
					}
					return nil
				})
				if refuse != (err == errRefused) {
					t.Errorf("writer refused %v: %v", refuse, err)
					return
				}
				if refuse {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, c := range cs {
					if c.del {
						delete(m[c.b], c.k)
					} else {
						m.put(c.b, c.k, c.v)
					}
				}
			}()
		}
		wg.Wait()
		checkModel(t, s, m, memos, r, fmt.Sprintf("round %d", round))
		switch r.IntN(5) {
		case 0:
			crash(t, s)
		case 1:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			continue
		}
		if s, err = Open(path); err != nil {
			t.Fatal(err)
		}
		checkModel(t, s, m, memos, r, fmt.Sprintf("round %d, reopened", round))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

var errRefused = fmt.Errorf("refused")

// A crash loses nothing acknowledged; a torn record at the log's tail (a
// write that was never acknowledged) is dropped, and so are records of an
// older generation left past a newer one's tail.
func TestLogRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wts.db")
	put := func(s *Local, k string, v int64) {
		t.Helper()
		if err := s.Update(func(tx Tx) error { return tx.Put(Metrics, []byte(k), v) }); err != nil {
			t.Fatal(err)
		}
	}
	get := func(s *Local, k string) (int64, bool) {
		t.Helper()
		var v int64
		var ok bool
		err := s.View(func(tx Tx) (err error) {
			ok, err = tx.Get(Metrics, []byte(k), &v)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		put(s, fmt.Sprint("a", i), int64(i))
	}
	crash(t, s)

	// Tear the last record: zero its last byte.
	file, data, gen := newestLog(t, path)
	_, end := readRecords(data[walHeader:], gen)
	if end == 0 {
		t.Fatal("no records in the log")
	}
	torn := bytes.Clone(data)
	torn[walHeader+end-1] = 0
	if err := os.WriteFile(file, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		if v, ok := get(s, fmt.Sprint("a", i)); !ok || v != int64(i) {
			t.Fatalf("a%d after a torn tail: %d %v", i, v, ok)
		}
	}
	if _, ok := get(s, "a9"); ok {
		t.Fatal("the torn record was replayed")
	}
	// Open replayed that generation and started the next, in the other
	// file; a write and a crash, then the old generation's records put
	// back after the new one's: they must not come back.
	put(s, "b", 1)
	crash(t, s)
	file2, now, newGen := newestLog(t, path)
	_, newEnd := readRecords(now[walHeader:], newGen)
	if file2 == file || newGen <= gen || newEnd == 0 {
		t.Fatalf("generation %d → %d (%s → %s), %d bytes of records", gen, newGen, file, file2, newEnd)
	}
	stale := append(bytes.Clone(now[:walHeader+newEnd]), data[walHeader:walHeader+end]...)
	if err := os.WriteFile(file2, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(s, "b"); !ok || v != 1 {
		t.Fatalf("b after a crash: %d %v", v, ok)
	}
	if _, ok := get(s, "a9"); ok {
		t.Fatal("a record of an older generation was replayed")
	}

	// A log that is not ours stops the open.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file2, []byte("not a log at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "not a wts log") {
		t.Fatalf("open with a foreign log: %v", err)
	}
}

// newestLog returns the log file of the store at path that holds the
// newest generation, its bytes and that generation.
func newestLog(t *testing.T, path string) (string, []byte, uint64) {
	t.Helper()
	var file string
	var data []byte
	var gen uint64
	for i := range 2 {
		f := fmt.Sprintf("%s-wal.%d", path, i)
		d, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if g := binary.LittleEndian.Uint64(d[8:walHeader]); file == "" || g > gen {
			file, data, gen = f, d, g
		}
	}
	return file, data, gen
}

// A group's record decodes to the layer it was made from.
func TestRecordRoundTrip(t *testing.T) {
	l := newLayer()
	l.set(Ops, "wtr_a\x00\x01", entry{val: []byte{1, 2, 3}})
	l.set(Ops, "wtr_b", entry{del: true})
	l.set(Metrics, "m", entry{val: []byte{}})
	got, err := decodeLayer(l.encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.n != 3 || fmt.Sprint(got.buckets[Ops].m) != fmt.Sprint(l.buckets[Ops].m) || fmt.Sprint(got.buckets[Metrics].m) != fmt.Sprint(l.buckets[Metrics].m) {
		t.Fatalf("round trip: %v / %v", got.buckets, l.buckets)
	}
	if _, err := decodeLayer([]byte{opPut, 3, 'o', 'p', 's', 0}); err == nil {
		t.Fatal("an empty key was accepted")
	}
	if _, err := decodeLayer([]byte{9}); err == nil {
		t.Fatal("an unknown entry kind was accepted")
	}
}

// The log's decoders never panic, and what decodes re-encodes to a record
// that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	l := newLayer()
	l.set(Ops, "k", entry{val: []byte("v")})
	l.set(Heads, "h", entry{del: true})
	f.Add(l.encode(nil))
	f.Add([]byte{opPut, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, p []byte) {
		readRecords(p, 1)
		l, err := decodeLayer(p)
		if err != nil {
			return
		}
		again, err := decodeLayer(l.encode(nil))
		if err != nil || again.n != l.n {
			t.Fatalf("re-encoded record: %v, %d entries vs %d", err, again.n, l.n)
		}
	})
}

// Readers see whole group commits, whatever checkpoints land meanwhile
// (even between taking the layers and opening the file): one writer sets
// two keys to a counter i and adds record i in each write, and readers
// running alongside never see the keys differ or go back, or a record past
// them.
func TestSnapshotsAcrossCheckpoints(t *testing.T) {
	defer func(n int, gap func()) { checkpointEntries, snapshotGap = n, gap }(checkpointEntries, snapshotGap)
	checkpointEntries = 5
	snapshotGap = func() { time.Sleep(time.Millisecond) } // checkpoints land between the halves
	s, err := Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writes = 400
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				var x, y, v int64
				var at, after bool
				err := s.View(func(tx Tx) (err error) {
					if _, err = tx.Get(Metrics, []byte("x"), &x); err != nil {
						return err
					}
					if _, err = tx.Get(Heads, []byte("y"), &y); err != nil {
						return err
					}
					if at, err = tx.Get(Ops, SeqKey("wtr_a", x), &v); err != nil {
						return err
					}
					after, err = tx.Get(Ops, SeqKey("wtr_a", x+1), &v)
					return err
				})
				if err != nil || x != y || x < last || at != (x > 0) || after {
					t.Errorf("read x=%d y=%d after %d, record %d there %v, record %d there %v: %v", x, y, last, x, at, x+1, after, err)
					return
				}
				last = x
			}
		}()
	}
	for i := int64(1); i <= writes; i++ {
		err := s.Update(func(tx Tx) error {
			if err := tx.Put(Metrics, []byte("x"), i); err != nil {
				return err
			}
			if err := tx.Put(Heads, []byte("y"), i); err != nil {
				return err
			}
			// A new key each write: a reader that saw x from an old layer
			// and this key from a newer file would see them disagree.
			return tx.Put(Ops, SeqKey("wtr_a", i), i)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
