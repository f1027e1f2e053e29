package etcdstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/persistence"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// voter starts an embedded voter in dir (joining the given clients).
func voter(t *testing.T, name, dir string, join ...string) *Server {
	t.Helper()
	s, err := Serve(ServerConfig{Name: name, Dir: dir, Peer: freeAddr(t), Client: freeAddr(t), Join: join, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func open(t *testing.T, srv *Server, blobDir string, remote bool) *Store {
	t.Helper()
	cli := srv.Client
	if remote {
		var err error
		if cli, err = Dial([]string{srv.URL}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
	}
	st, err := Open(Config{Client: cli, Prefix: "test/", BlobDir: blobDir, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

type rec struct {
	N    int
	Name string
	Blob []byte
}

func get(t *testing.T, st *Store, key string) (rec, bool) {
	t.Helper()
	var r rec
	var ok bool
	if err := st.View(func(tx persistence.Tx) (err error) {
		ok, err = tx.Get(persistence.Runs, []byte(key), &r)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r, ok
}

// The Store contract on etcd: writes durable and visible to every node,
// a failed writer leaves nothing, a writer sees its group's earlier
// writes, scans merge them in key order, a record's version names its
// bytes, and a large record goes to a blob file and back.
func TestStore(t *testing.T) {
	srv := voter(t, "a", t.TempDir())
	defer srv.Close()
	blobDir := t.TempDir()
	a, b := open(t, srv, blobDir, false), open(t, srv, blobDir, true)

	put := func(st *Store, key string, r rec) error {
		return st.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Runs, []byte(key), &r) })
	}
	for i := range 5 {
		if err := put(a, "k"+strconv.Itoa(i), rec{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := get(t, b, "k3"); !ok || r.N != 3 {
		t.Fatalf("another node reads %+v %v", r, ok)
	}
	boom := errors.New("boom")
	if err := a.Update(func(tx persistence.Tx) error {
		_ = tx.Put(persistence.Runs, []byte("k1"), &rec{N: 100})
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if r, _ := get(t, b, "k1"); r.N != 1 {
		t.Fatalf("a failed writer's write stayed: %+v", r)
	}

	// Writers grouped together: each sees those before it.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Update(func(tx persistence.Tx) error {
				if err := tx.Put(persistence.Runs, []byte(fmt.Sprintf("g%02d", i)), &rec{N: i}); err != nil {
					return err
				}
				var r rec
				if ok, err := tx.Get(persistence.Runs, []byte(fmt.Sprintf("g%02d", i)), &r); !ok || err != nil || r.N != i {
					return fmt.Errorf("own write: %v %v %+v", ok, err, r)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	// A scan inside a writer: its own and etcd's records, in key order,
	// from after a key, a delete hiding one.
	var seen []string
	if err := a.Update(func(tx persistence.Tx) error {
		if err := tx.Put(persistence.Runs, []byte("k21"), &rec{N: 21}); err != nil {
			return err
		}
		if err := tx.Delete(persistence.Runs, []byte("k3")); err != nil {
			return err
		}
		return tx.Scan(persistence.Runs, []byte("k"), []byte("k1"), func(key, raw []byte) (bool, error) {
			seen = append(seen, string(key))
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[k2 k21 k4]" {
		t.Fatalf("scan: %v", seen)
	}

	// Versions: the same bytes read again are reported the same.
	var m persistence.Memo[rec]
	for range 2 {
		if err := b.View(func(tx persistence.Tx) error {
			r, ok, err := m.Get(tx, persistence.Runs, []byte("k4"))
			if !ok || err != nil || r.N != 4 {
				return fmt.Errorf("memo: %+v %v %v", r, ok, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.View(func(tx persistence.Tx) error {
		_, version, _ := tx.Read(persistence.Runs, []byte("k4"), 0)
		if _, _, same := tx.Read(persistence.Runs, []byte("k4"), version); !same || version == 0 {
			return fmt.Errorf("version %d not the same", version)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), BlobAbove/8)
	if err := put(a, "big", rec{Blob: big}); err != nil {
		t.Fatal(err)
	}
	if r, _ := get(t, b, "big"); !bytes.Equal(r.Blob, big) {
		t.Fatal("a blob record came back different")
	}
	c, cancel := ctx()
	defer cancel()
	resp, err := srv.Client.Get(c, "test/runs/big")
	if err != nil || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 33 {
		t.Fatalf("etcd holds %v %v", resp, err)
	}
}

// Two nodes add to one counter, each reading it (from its cache, stale
// once the other has written) and writing it back: every addition lands
// once, because a commit whose read has changed runs again.
func TestConcurrentNodes(t *testing.T) {
	srv := voter(t, "a", t.TempDir())
	defer srv.Close()
	blobDir := t.TempDir()
	stores := []*Store{open(t, srv, blobDir, false), open(t, srv, blobDir, true)}
	const each = 60
	var wg sync.WaitGroup
	for _, st := range stores {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each / 4 {
					if err := st.Update(func(tx persistence.Tx) error {
						var r rec
						if _, err := tx.Get(persistence.Runs, []byte("counter"), &r); err != nil {
							return err
						}
						r.N++
						return tx.Put(persistence.Runs, []byte("counter"), &r)
					}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if r, _ := get(t, stores[0], "counter"); r.N != 2*each {
		t.Fatalf("counter %d, want %d", r.N, 2*each)
	}
}

// The fence: a writer that checks an epoch it read before another node
// moved it on finds the new one when it commits, and writes nothing.
func TestStaleWriterFenced(t *testing.T) {
	srv := voter(t, "a", t.TempDir())
	defer srv.Close()
	blobDir := t.TempDir()
	old, now := open(t, srv, blobDir, false), open(t, srv, blobDir, true)
	errFenced := errors.New("fenced")
	fencedPut := func(st *Store, epoch int, key string) error {
		return st.Update(func(tx persistence.Tx) error {
			var h rec
			if _, err := tx.Get(persistence.Heads, []byte("run"), &h); err != nil {
				return err
			}
			if h.N != epoch {
				return errFenced
			}
			return tx.Put(persistence.Runs, []byte(key), &rec{N: epoch})
		})
	}
	if err := old.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Heads, []byte("run"), &rec{N: 1}) }); err != nil {
		t.Fatal(err)
	}
	if err := fencedPut(old, 1, "first"); err != nil { // old's cache now holds epoch 1
		t.Fatal(err)
	}
	if err := now.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Heads, []byte("run"), &rec{N: 2}) }); err != nil {
		t.Fatal(err)
	}
	if err := fencedPut(old, 1, "stale"); !errors.Is(err, errFenced) {
		t.Fatalf("a stale writer: %v", err)
	}
	if _, ok := get(t, now, "stale"); ok {
		t.Fatal("a stale writer's record was written")
	}
}

// Three voters: two join the first; with one of them gone the other two
// still commit (a quorum), and a voter that restarts from its folder has
// every record.
func TestThreeVoters(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := voter(t, "a", dirs[0])
	defer a.Close()
	b := voter(t, "b", dirs[1], a.URL)
	c := voter(t, "c", dirs[2], a.URL, b.URL)
	defer c.Close()
	blobDir := t.TempDir()
	sa := open(t, a, blobDir, false)
	if err := sa.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Runs, []byte("x"), &rec{N: 1}) }); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := sa.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Runs, []byte("y"), &rec{N: 2}) }); err != nil {
		t.Fatalf("two of three voters: %v", err)
	}
	b2, err := Serve(ServerConfig{Name: "b", Dir: dirs[1], Peer: b.etcd.Config().ListenPeerUrls[0].Host,
		Client: b.URL, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	sb := open(t, b2, blobDir, false)
	for key, n := range map[string]int{"x": 1, "y": 2} {
		if r, ok := get(t, sb, key); !ok || r.N != n {
			t.Fatalf("restarted voter reads %s: %+v %v", key, r, ok)
		}
	}

	// c's machine is gone for good: it is removed, and the two left are a
	// quorum of two.
	c.Close()
	if err := RemoveVoter([]string{a.URL}, "nobody"); err == nil {
		t.Error("removed a voter that is not there")
	}
	if err := RemoveVoter([]string{a.URL, b2.URL}, "c"); err != nil {
		t.Fatal(err)
	}
	vs, err := Voters([]string{a.URL})
	if err != nil || len(vs) != 2 || slices.ContainsFunc(vs, func(v Voter) bool { return v.Name == "c" }) {
		t.Fatalf("voters after the removal: %+v %v", vs, err)
	}
	if err := sa.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Runs, []byte("z"), &rec{N: 3}) }); err != nil {
		t.Fatalf("two voters of two: %v", err)
	}
}

// BenchmarkUpdate is persistence's BenchmarkUpdate on one embedded voter
// (in-process client): each writer checks its head, then puts an operation
// record and the head, as a grain's submission does.
func BenchmarkUpdate(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			srv, err := Serve(ServerConfig{Name: "a", Dir: dir, Peer: freeAddr(b), Client: freeAddr(b), Log: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			s, err := Open(Config{Client: srv.Client, BlobDir: b.TempDir(), Log: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var commits atomic.Int64
			s.OnCommit(func(int, int, time.Duration) { commits.Add(1) })
			payload := make([]byte, 300)
			var next atomic.Int64
			b.SetParallelism((writers + 1) / 2)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				run := fmt.Sprintf("wtr_%d", next.Add(1))
				for seq := int64(1); pb.Next(); seq++ {
					err := s.Update(func(tx persistence.Tx) error {
						var head int64
						if _, err := tx.Get(persistence.Heads, []byte(run), &head); err != nil {
							return err
						}
						if err := tx.Put(persistence.Ops, persistence.SeqKey(run, seq), payload); err != nil {
							return err
						}
						return tx.Put(persistence.Heads, []byte(run), seq)
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(b.N)/float64(max(commits.Load(), 1)), "writes/commit")
		})
	}
}

// The blob files no record refers to go, once older than the grace: the
// file a rewritten record left and the file of a transaction that never
// committed; a referenced one stays, and so does an old file that a
// writer reuses (it is touched).
func TestCollectBlobs(t *testing.T) {
	srv := voter(t, "a", t.TempDir())
	defer srv.Close()
	blobDir := t.TempDir()
	st := open(t, srv, blobDir, false)
	big := func(c byte) rec { return rec{Blob: bytes.Repeat([]byte{c}, BlobAbove+1)} }
	put := func(key string, r rec) {
		t.Helper()
		if err := st.Update(func(tx persistence.Tx) error { return tx.Put(persistence.Runs, []byte(key), &r) }); err != nil {
			t.Fatal(err)
		}
	}
	files := func() []string {
		var out []string
		filepath.WalkDir(blobDir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out = append(out, path)
			}
			return err
		})
		return out
	}
	age := func() {
		old := time.Now().Add(-2 * time.Hour)
		for _, f := range files() {
			if err := os.Chtimes(f, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("k", big('a'))
	put("k", big('b')) // the file of 'a' is left
	raw, err := persistence.Marshal(big('c'))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.blobs.store(raw); err != nil { // written, its transaction never committed
		t.Fatal(err)
	}
	put("d", big('d'))
	if n := len(files()); n != 4 {
		t.Fatalf("%d blob files, want 4", n)
	}
	if n, err := st.CollectBlobs(time.Hour); err != nil || n != 0 {
		t.Fatalf("young files collected: %d %v", n, err)
	}
	age()
	put("e", big('d')) // reuses the file of 'd', old by now: touched
	if n, err := st.CollectBlobs(time.Hour); err != nil || n != 2 {
		t.Fatalf("collected %d files, want 2 (%v)", n, err)
	}
	if n := len(files()); n != 2 {
		t.Fatalf("%d blob files left, want 2", n)
	}
	for key, c := range map[string]byte{"k": 'b', "d": 'd', "e": 'd'} {
		if r, ok := get(t, st, key); !ok || !bytes.Equal(r.Blob, big(c).Blob) {
			t.Fatalf("record %s after the collection: %v", key, ok)
		}
	}
}
