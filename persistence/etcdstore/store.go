// Package etcdstore is the cluster's Store: every record in etcd, which
// replicates it by raft to a quorum of voters before a write returns, so a
// grain that moves to another node after its node dies finds its state
// there. Writes are optimistic transactions: each read is checked again
// when the group commits (etcd's compare on a key's modification
// revision), so a writer that read what another node has since changed
// (a stale activation, above all) commits nothing and runs again on what
// is there now. Records above BlobAbove go to content-addressed files on
// the shared volume, and etcd holds their hash.
package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/wts-project/wts/persistence"
)

const (
	// maxBatch bounds one group commit's writers, and maxBatchBytes its
	// bytes: etcd refuses a request above its MaxRequestBytes (1.5 MiB by
	// default) and a transaction above MaxTxnOps operations (see Serve).
	maxBatch      = 256
	maxBatchBytes = 1 << 20
	// maxConflicts bounds how often one group runs again after another
	// writer changed what it read, before its writers are told.
	maxConflicts = 16
	// opTimeout bounds one request to etcd: a cluster that has lost its
	// quorum fails writes after it, not never.
	opTimeout = 10 * time.Second
)

// ErrConflict is a write that kept finding what it read changed by another
// writer (maxConflicts times).
var ErrConflict = errors.New("store: the records read kept changing under the write")

// Store is persistence.Store on etcd. Every node of a cluster opens its
// own Store on a client of the same etcd cluster, under the same prefix.
type Store struct {
	cli      *clientv3.Client
	prefix   string
	blobs    blobs
	log      *slog.Logger
	in       chan *write
	stop     chan struct{}
	done     chan struct{}
	cache    cache
	onCommit func(writes, pages int, took time.Duration)
}

// write is one Update waiting for its group.
type write struct {
	fn   func(persistence.Tx) error
	done chan error
}

// Config says where a Store keeps its records.
type Config struct {
	Client *clientv3.Client
	// Prefix is put before every key (one etcd cluster may hold several
	// stores).
	Prefix string
	// BlobDir is the shared folder (on the volume every node mounts) for
	// records above BlobAbove.
	BlobDir string
	Log     *slog.Logger
	// CollectEvery, above 0, is how often the store removes the blob files
	// no record refers to any more (CollectBlobs with BlobGrace).
	CollectEvery time.Duration
}

// BlobGrace is how long a blob file is left alone after it was written or
// reused, whatever refers to it: far longer than a transaction may take.
const BlobGrace = time.Hour

var _ persistence.Store = (*Store)(nil)

// Open starts a Store on cfg.Client.
func Open(cfg Config) (*Store, error) {
	if cfg.Client == nil || cfg.BlobDir == "" {
		return nil, errors.New("etcdstore: a client and a blob folder are required")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Store{cli: cfg.Client, prefix: cfg.Prefix, blobs: blobs{dir: cfg.BlobDir}, log: log.With("part", "store"),
		in: make(chan *write, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	s.cache.init()
	go s.commitLoop()
	if cfg.CollectEvery > 0 {
		go s.collectLoop(cfg.CollectEvery)
	}
	return s, nil
}

// collectLoop removes unreferenced blob files every period until Close.
func (s *Store) collectLoop(every time.Duration) {
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(every):
		}
		if n, err := s.CollectBlobs(BlobGrace); err != nil {
			s.log.Error("collect blob files", "err", err)
		} else if n > 0 {
			s.log.Info("collected blob files no record refers to", "removed", n)
		}
	}
}

// CollectBlobs removes the blob files that no record refers to and that
// nothing wrote or reused for grace (a record rewritten with other content
// leaves its old file; a transaction that did not commit leaves its new
// one). Collectors on several nodes may run at once.
func (s *Store) CollectBlobs(grace time.Duration) (int, error) {
	return s.blobs.collect(grace, s.blobRefs)
}

// blobRefs lists the blob hashes (hex) the store's records refer to, read
// page by page.
func (s *Store) blobRefs() (map[string]bool, error) {
	refs := map[string]bool{}
	from, end := s.prefix, clientv3.GetPrefixRangeEnd(s.prefix)
	for {
		c, cancel := ctx()
		resp, err := s.cli.Get(c, from, clientv3.WithRange(end), clientv3.WithLimit(refPage))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list blob references: %w", err)
		}
		for _, kv := range resp.Kvs {
			if len(kv.Value) > 0 && kv.Value[0] == blob {
				refs[blobName(kv.Value[1:])] = true
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return refs, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// refPage is how many records one read of blobRefs takes.
const refPage = 1000

// OnCommit sets fn to be told of every group commit: its writers, no pages
// (etcd's own), and the time it took.
func (s *Store) OnCommit(fn func(writes, pages int, took time.Duration)) { s.onCommit = fn }

// Update runs fn in a write transaction, grouped with others into one etcd
// transaction; its writes are replicated to a quorum when it returns nil.
// fn may run more than once: again whenever another writer changed what
// it read before its group committed. So it must have no effect outside tx
// but assignments that its last run overwrites.
func (s *Store) Update(fn func(persistence.Tx) error) error {
	w := &write{fn: fn, done: make(chan error, 1)}
	select {
	case s.in <- w:
	case <-s.stop:
		return errClosed
	}
	return <-w.done
}

var errClosed = errors.New("etcdstore: closed")

// View runs fn over the records as etcd holds them now (a linearizable
// read, then each later read at the same revision).
func (s *Store) View(fn func(persistence.Tx) error) error {
	t := &tx{s: s, view: true}
	err := fn(t)
	return cmp.Or(t.err, err)
}

// Close stops taking writes once those already waiting are done.
func (s *Store) Close() error {
	close(s.stop)
	<-s.done
	return nil
}

func (s *Store) commitLoop() {
	defer close(s.done)
	for {
		var w *write
		select {
		case w = <-s.in:
		case <-s.stop:
			for {
				select {
				case w := <-s.in:
					s.commit([]*write{w})
				default:
					return
				}
			}
		}
		batch := []*write{w}
	gather:
		for len(batch) < maxBatch {
			select {
			case w := <-s.in:
				batch = append(batch, w)
			default:
				break gather
			}
		}
		s.commit(batch)
	}
}

// commit runs the batch's functions, one after another on what those
// before them wrote, and commits their writes in one etcd transaction
// that holds only if nothing they read has changed since. When something
// has, the batch runs again on fresh reads. A batch too large for one
// request is split.
func (s *Store) commit(batch []*write) {
	start, conflicts := time.Now(), 0
	for {
		g := newGroup(s)
		errs := make([]error, len(batch))
		n := len(batch)
		for i, w := range batch {
			if i > 0 && g.full() {
				n = i
				break
			}
			errs[i] = g.run(w.fn)
		}
		ok, err := g.commit()
		if transient(err) && time.Since(start) < transientFor {
			// Whether it was applied is not known: the group runs again on
			// what is there now (its writers find their own writes, if they
			// were, and do nothing twice: seq_id, idempotency keys, fences).
			g.forgetAll()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		switch {
		case err != nil:
			for _, w := range batch[:n] {
				w.done <- err
			}
		case !ok && conflicts < maxConflicts:
			conflicts++
			g.forgetReads()
			continue
		case !ok:
			for _, w := range batch[:n] {
				w.done <- ErrConflict
			}
		default:
			for i, w := range batch[:n] {
				w.done <- errs[i]
			}
			if s.onCommit != nil {
				s.onCommit(n, 0, time.Since(start))
			}
		}
		if n < len(batch) {
			s.commit(batch[n:])
		}
		return
	}
}

// key is a record's etcd key: prefix, bucket, '/', key.
func (s *Store) key(b persistence.Bucket, key []byte) string {
	return s.prefix + string(b) + "/" + string(key)
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// get reads a key from etcd now (rev 0) or at rev: its stored record
// (blobs resolved), its modification revision, and the revision read at.
func (s *Store) get(k string, rev int64) (raw []byte, mod, at int64, err error) {
	c, cancel := context.WithTimeout(context.Background(), transientFor)
	defer cancel()
	opts := []clientv3.OpOption{}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	var resp *clientv3.GetResponse
	err = again(func() (err error) {
		resp, err = s.cli.Get(c, k, opts...)
		return err
	})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read %q: %w", k, err)
	}
	at = resp.Header.Revision
	if len(resp.Kvs) == 0 {
		return nil, 0, at, nil
	}
	kv := resp.Kvs[0]
	raw, err = s.blobs.resolve(kv.Value)
	return raw, kv.ModRevision, at, err
}
