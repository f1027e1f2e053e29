// Package persistence is the node's durable state: one bbolt file of
// msgpack records, written through a group committer so that every
// acknowledged write is fsynced before the reply without paying one fsync per
// write, and the run volume that holds trainer snapshots.
package persistence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// Bucket names one keyspace of the store.
type Bucket string

// The store's keyspaces. Keys are ids, or an id followed by a big-endian
// sequence number so that a cursor walks a run's records in seq_id order.
const (
	Keys        Bucket = "keys"        // API key id → Key
	Sessions    Bucket = "sessions"    // session id → Session
	Runs        Bucket = "runs"        // run id → Run
	Ops         Bucket = "ops"         // run id + seq → Operation
	Index       Bucket = "opindex"     // id of an operation, or of the checkpoint or artifact one made → run id + seq
	Idem        Bucket = "idem"        // run id + 0 + idempotency key → seq
	Requests    Bucket = "requests"    // request_id scope → resource id
	Metrics     Bucket = "metrics"     // run id + seq → Metric
	Heads       Bucket = "heads"       // run id → Head
	Checkpoints Bucket = "checkpoints" // run id + seq of the save_state → Checkpoint
	Artifacts   Bucket = "artifacts"   // run id + seq of the export_lora → Artifact
	Credentials Bucket = "credentials" // credential id → Credential
	Exports     Bucket = "exports"     // export id → Export
	Samplers    Bucket = "samplers"    // sampler id → Sampler
)

var buckets = []Bucket{Keys, Sessions, Runs, Ops, Index, Idem, Requests, Metrics, Heads, Checkpoints, Artifacts, Credentials, Exports, Samplers}

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("store is closed")

// maxBatch bounds one group commit, so that a burst cannot hold the write
// lock (and delay its first writer) for long.
const maxBatch = 512

// Store is the bbolt file with its group committer.
type Store struct {
	db       *bolt.DB
	queue    chan *write
	done     chan struct{}
	mu       sync.RWMutex // held shared by writers, exclusively by Close
	closed   bool
	onCommit atomic.Pointer[func(writes, pages int, took time.Duration)]
}

// OnCommit sets fn to be told of every group commit: how many writes it
// carried, how many pages it wrote to the file (meta page included) and how
// long it took, fsync included.
func (s *Store) OnCommit(fn func(writes, pages int, took time.Duration)) { s.onCommit.Store(&fn) }

type write struct {
	fn  func(*Tx) error
	err chan error
}

// Open opens (creating if needed) the store file at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store folder: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        2 * time.Second, // another process holds the file: fail, do not hang
		NoFreelistSync: true,            // the freelist is rebuilt on open; fewer pages per fsync
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("create buckets: %w", err)
	}
	s := &Store{db: db, queue: make(chan *write, 4*maxBatch), done: make(chan struct{})}
	go s.commitLoop()
	return s, nil
}

// Update runs fn in a read-write transaction and returns once the
// transaction is on disk. Concurrent calls share one transaction and one
// fsync (a group commit): while one batch syncs, the next one gathers, so
// the batch grows with the load and no timer delays a lone writer.
//
// fn may run more than once (when another function in its batch fails, the
// batch is retried without it), so it must not have effects outside tx.
// An error from fn aborts only fn's own writes.
func (s *Store) Update(fn func(*Tx) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	w := &write{fn: fn, err: make(chan error, 1)}
	s.queue <- w
	s.mu.RUnlock()
	return <-w.err
}

// View runs fn in a read-only transaction over the last committed state.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// Close waits for queued writes and closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	return s.db.Close()
}

func (s *Store) commitLoop() {
	defer close(s.done)
	batch := make([]*write, 0, maxBatch)
	for w := range s.queue {
		batch = append(batch[:0], w)
	gather:
		for len(batch) < maxBatch {
			select {
			case w, ok := <-s.queue:
				if !ok {
					break gather
				}
				batch = append(batch, w)
			default:
				break gather
			}
		}
		s.commit(batch)
	}
}

// pagesWritten is the count of pages the store's transactions have written;
// the commit loop, the only writer, reads it around each commit.
func (s *Store) pagesWritten() int64 {
	st := s.db.Stats()
	return st.TxStats.GetWrite()
}

// itemError marks which function of a batch failed.
type itemError struct {
	i   int
	err error
}

func (e *itemError) Error() string { return e.err.Error() }

// commit writes a batch in one transaction. A function that fails gets its
// error and the rest are committed again without it.
func (s *Store) commit(batch []*write) {
	start := time.Now()
	pages := s.pagesWritten()
	for len(batch) > 0 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			t := &Tx{tx: tx}
			for i, w := range batch {
				if err := w.fn(t); err != nil {
					return &itemError{i, err}
				}
			}
			return nil
		})
		var ie *itemError
		if errors.As(err, &ie) {
			batch[ie.i].err <- ie.err
			batch = append(batch[:ie.i], batch[ie.i+1:]...)
			continue
		}
		if fn := s.onCommit.Load(); fn != nil && err == nil {
			(*fn)(len(batch), int(s.pagesWritten()-pages), time.Since(start))
		}
		for _, w := range batch {
			w.err <- err
		}
		return
	}
}

// Tx is one transaction: msgpack records by bucket and key.
type Tx struct{ tx *bolt.Tx }

// Get decodes the record at key into v and reports whether it exists.
func (t *Tx) Get(b Bucket, key []byte, v any) (bool, error) {
	raw := t.tx.Bucket([]byte(b)).Get(key)
	if raw == nil {
		return false, nil
	}
	if err := msgpack.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("decode %s/%q: %w", b, key, err)
	}
	return true, nil
}

// Put encodes v and stores it at key.
func (t *Tx) Put(b Bucket, key []byte, v any) error {
	raw, err := msgpack.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%q: %w", b, key, err)
	}
	return t.tx.Bucket([]byte(b)).Put(key, raw)
}

// Delete removes key.
func (t *Tx) Delete(b Bucket, key []byte) error {
	return t.tx.Bucket([]byte(b)).Delete(key)
}

// Scan calls fn on the records whose keys start with prefix and come after
// from (from itself excluded; nil starts at the prefix), in key order, until
// fn returns false.
func (t *Tx) Scan(b Bucket, prefix, from []byte, fn func(key, raw []byte) (bool, error)) error {
	c := t.tx.Bucket([]byte(b)).Cursor()
	var k, v []byte
	if from == nil {
		k, v = c.Seek(prefix)
	} else if k, v = c.Seek(from); k != nil && string(k) == string(from) {
		k, v = c.Next()
	}
	for ; k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix); k, v = c.Next() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// Decode decodes one raw record handed to a Scan callback.
func Decode(raw []byte, v any) error { return msgpack.Unmarshal(raw, v) }
