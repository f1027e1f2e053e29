// Package persistence is the node's durable state: one bbolt file of
// msgpack records behind a write-ahead log, written through a group
// committer so that every acknowledged write is fsynced before the reply
// without paying one fsync per write, and the run volume that holds trainer
// snapshots.
package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	Leases      Bucket = "leases"      // session id → its lease (actors/lease)
	Live        Bucket = "live"        // organization → its live sessions and runs (actors/limits)
	Placements  Bucket = "placements"  // grain kind/identity → the cluster member it was placed on (cluster.Placement)
	Accounts    Bucket = "accounts"    // tenant → its ledger account (providers/ledger)
	Ledger      Bucket = "ledger"      // tenant + seq → a ledger entry
	Budgets     Bucket = "budgets"     // session id → its budget: ceiling, holds and spend
	Unsettled   Bucket = "unsettled"   // due time + run or sampler id + seq → session id: an operation with pending usage (actors/usage)
	Slots       Bucket = "slots"       // provider_a's dedicated trainers: count/member → reserved, session/id → member (actors/slots)
	Reserved    Bucket = "reserved"    // tenant + session id → nothing: the tenant's live platform sessions, whose ceilings its ledger holds
	Listed      Bucket = "listed"      // tenant + kind + newest-first time + id → nothing: a tenant's sessions and runs (ListedKey)
)

var buckets = []Bucket{Keys, Sessions, Runs, Ops, Index, Idem, Requests, Metrics, Heads, Checkpoints, Artifacts, Credentials, Exports, Samplers, Leases, Live, Placements, Accounts, Ledger, Budgets, Unsettled, Slots, Reserved, Listed}

// meta holds the store's own records: the newest log generation the file
// has absorbed.
const meta Bucket = "meta"

var absorbedKey = []byte("log_generation")

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("store is closed")

// maxBatch bounds one group commit, so that a burst cannot hold the write
// lock (and delay its first writer) for long.
const maxBatch = 512

// When the generation being written holds this many entries or bytes, or
// this many log bytes, or no write came for checkpointIdle, the log moves
// on to the next generation and a checkpoint moves the finished one into
// the store file in the background: one bbolt commit (its pages and sync)
// for thousands of writes, which keeps what readers walk and a restart
// replays small. Run in the commit loop, a checkpoint of thousands of
// entries held every writer for tens of milliseconds.
const (
	checkpointBytes = 16 << 20
	checkpointLog   = 64 << 20
	checkpointIdle  = 100 * time.Millisecond
)

// While writes come from several writers, a group commit waits for more
// that come less than groupGap apart, until groupWait after the previous
// group started (see gather).
const (
	groupGap  = 300 * time.Microsecond
	groupWait = 2 * time.Millisecond
)

// initialMap is the store file's first memory map: 1 GiB where addresses
// are 64 bits, bbolt's own doubling elsewhere.
const initialMap = (strconv.IntSize / 64) << 30

// checkpointEntries is a variable so that tests can checkpoint often.
var checkpointEntries = 8192

// Local is one node's Store: a write is durable once its group commit's
// record is in the write-ahead log (one sequential write and fdatasync);
// the group's writes are then published as a layer over the bbolt file,
// which checkpoints bring up to date.
type Local struct {
	db       *bolt.DB
	logs     [2]*wal // generation g is written to logs[g%2]
	queue    chan *write
	done     chan struct{}
	mu       sync.RWMutex // held shared by writers, exclusively by Close
	closed   bool
	onCommit atomic.Pointer[func(writes, pages int, took time.Duration)]
	around   atomic.Pointer[func(checkpoint func())]

	// layers are the published writes, oldest first, each tagged with the
	// log generation that holds it: an immutable slice, replaced whole
	// under lmu (by the commit loop as it publishes, by a checkpoint as it
	// drops what it absorbed). A reader uses the layers newer than the
	// generation its file snapshot has absorbed (snapshot), so checkpoints
	// need no lock against readers.
	layers atomic.Pointer[[]*layer]
	lmu    sync.Mutex

	// The commit loop's own: the generation being written, the entries and
	// bytes published into it, the running checkpoint's outcome (nil when
	// none runs), pages a finished checkpoint wrote (reported with the next
	// group commit), and the error that stopped writes (a log or checkpoint
	// write failed, so what is on disk is no longer known; a restart
	// replays the log).
	gen                   uint64
	own                   *layer // a writer's own changes, reused (see layer.reset)
	pending, pendingBytes int
	ckpt                  chan ckptResult
	ckptPages             int
	broken                error
}

type ckptResult struct {
	pages int
	err   error
}

// AroundCheckpoint sets fn to run every checkpoint (which it must call):
// the process's own tuning around one (cmd/wts gives it a spare
// processor).
func (s *Local) AroundCheckpoint(fn func(checkpoint func())) { s.around.Store(&fn) }

// OnCommit sets fn to be told of every group commit: how many writes it
// carried, how many pages it wrote (its log record, and the store file's
// pages of a checkpoint that finished since the last report) and how long
// it took, its sync included.
func (s *Local) OnCommit(fn func(writes, pages int, took time.Duration)) { s.onCommit.Store(&fn) }

type write struct {
	fn  func(Tx) error
	err chan error
}

// Open opens (creating if needed) the store file at path and its
// write-ahead log beside it (path + "-wal.0" and "-wal.1"), replaying what
// the log holds that the file has not absorbed.
func Open(path string) (*Local, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store folder: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        2 * time.Second, // another process holds the file: fail, do not hang
		NoFreelistSync: true,            // the freelist is rebuilt on open; fewer pages per fsync
		FreelistType:   bolt.FreelistMapType,
		// Statistics take a lock of their own twice in every transaction,
		// and the store's readers begin one for every group commit and
		// most submissions; a checkpoint counts its pages from its own
		// transaction instead.
		NoStatistics: true,
		// Mapped this large from the start, the file is not remapped as it
		// grows (bbolt doubles the map, and a remap waits for every open
		// read transaction while new ones wait for it, then copies the
		// writer's nodes out of the old map: ~4% of what a node allocates
		// under load). The map is address space, not memory.
		InitialMmapSize: initialMap,
	})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Local{db: db, queue: make(chan *write, 4*maxBatch), done: make(chan struct{}), own: newLayer()}
	if err := s.recover(path); err != nil {
		s.closeLogs()
		db.Close()
		return nil, err
	}
	none := []*layer{}
	s.layers.Store(&none)
	go s.commitLoop()
	return s, nil
}

// recover creates the buckets, opens both log files, moves into the store
// file the generations it has not absorbed (oldest first), and starts the
// next generation.
func (s *Local) recover(path string) error {
	var absorbed uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range append(buckets, meta) {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		absorbed = absorbedIn(tx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("create buckets: %w", err)
	}
	var recs [2][][]byte
	for i := range s.logs {
		if s.logs[i], recs[i], err = openWAL(fmt.Sprintf("%s-wal.%d", path, i)); err != nil {
			return err
		}
	}
	order := []int{0, 1}
	if s.logs[1].gen < s.logs[0].gen {
		order = []int{1, 0}
	}
	newest := absorbed
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, i := range order {
			if s.logs[i].gen <= absorbed {
				continue
			}
			for j, rec := range recs[i] {
				l, err := decodeLayer(rec)
				if err != nil {
					return fmt.Errorf("log %d record %d: %w", s.logs[i].gen, j, err)
				}
				if err := l.apply(tx); err != nil {
					return err
				}
			}
			newest = s.logs[i].gen
		}
		if newest == absorbed {
			return nil
		}
		return putAbsorbed(tx, newest)
	})
	if err != nil {
		return fmt.Errorf("replay log: %w", err)
	}
	s.gen = max(newest, s.logs[0].gen, s.logs[1].gen) + 1
	return s.logs[s.gen%2].reset(s.gen)
}

func (s *Local) closeLogs() {
	for _, lg := range s.logs {
		if lg != nil {
			lg.close()
		}
	}
}

// absorbedIn is the newest log generation the store file holds.
func absorbedIn(tx *bolt.Tx) uint64 {
	if v := tx.Bucket([]byte(meta)).Get(absorbedKey); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putAbsorbed(tx *bolt.Tx, gen uint64) error {
	return tx.Bucket([]byte(meta)).Put(absorbedKey, binary.BigEndian.AppendUint64(nil, gen))
}

// Update runs fn in a read-write transaction and returns once its writes
// are on disk. Concurrent calls share one log record and one fdatasync (a
// group commit): while one group syncs, the next one gathers, so the group
// grows with the load and no timer delays a lone writer. Writers of a group
// run one after another, each seeing the writes of those before it. An
// error from fn discards fn's writes only. fn must not have effects outside
// tx.
func (s *Local) Update(fn func(Tx) error) error {
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
func (s *Local) View(fn func(Tx) error) error {
	btx, ls, err := s.snapshot()
	if err != nil {
		return err
	}
	defer btx.Rollback()
	return fn(&localTx{btx: btx, layers: ls})
}

// snapshotGap runs between the two halves of a snapshot: tests widen it so
// that checkpoints land there.
var snapshotGap = func() {}

// snapshot pairs a store-file snapshot with the published layers it lacks.
// The layers are taken first: a checkpoint that lands before the file is
// opened only moves generations into it, and the file's absorbed
// generation then says which of the taken layers it already holds (layers
// are dropped only after the file has them, so none it lacks is missing).
func (s *Local) snapshot() (*bolt.Tx, []*layer, error) {
	ls := *s.layers.Load()
	snapshotGap()
	btx, err := s.db.Begin(false)
	if err != nil {
		return nil, nil, fmt.Errorf("read store: %w", err)
	}
	a := absorbedIn(btx)
	i := 0
	for i < len(ls) && ls[i].gen <= a {
		i++
	}
	return btx, ls[i:], nil
}

// Close waits for queued writes, moves everything into the store file and
// closes it.
func (s *Local) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	err := s.broken
	if s.ckpt != nil {
		if r := <-s.ckpt; err == nil {
			err = r.err
		}
		s.ckpt = nil
	}
	if err == nil && s.pending > 0 {
		s.startCheckpoint()
		if s.ckpt != nil {
			err = (<-s.ckpt).err
		}
		if err == nil {
			err = s.broken
		}
	}
	s.closeLogs()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Local) commitLoop() {
	defer close(s.done)
	batch := make([]*write, 0, maxBatch)
	idle := time.NewTimer(checkpointIdle)
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	last, lastStart := 0, time.Time{} // the previous group's writes and start
	for {
		var idleC <-chan time.Time
		if s.pending > 0 && s.ckpt == nil && s.broken == nil {
			idle.Reset(checkpointIdle)
			idleC = idle.C
		}
		var w *write
		var ok bool
		select {
		case w, ok = <-s.queue:
		case r := <-s.ckpt:
			s.finished(r)
			continue
		case <-idleC:
			s.startCheckpoint()
			continue
		}
		if !ok {
			return
		}
		batch = append(batch[:0], w)
		var gap time.Duration
		if last >= 2 {
			gap = groupGap
		}
		batch = s.gather(batch, gap, lastStart.Add(groupWait), wait)
		last, lastStart = len(batch), time.Now()
		s.commit(batch)
	}
}

// gather adds the queued writes to batch, up to maxBatch. With a gap it
// then waits for more as long as each comes within gap of the one before,
// until deadline. The commit loop asks for that while writes come from
// several writers (the previous group had two or more) because a sync
// costs CPU as well as time (on virtual disks an fdatasync's system time
// is a good part of its wall time), and with many clients and small
// groups the syncs were a large share of the service's CPU while the
// cores were the limit. Waiting grows the groups and takes CPU off each
// submission (bench/apibench's "store" and "service CPU" lines show
// both). A lone writer never waits; a few clients whose writes are all in
// wait one gap.
// t is the loop's timer, stopped.
func (s *Local) gather(batch []*write, gap time.Duration, deadline time.Time, t *time.Timer) []*write {
	for len(batch) < maxBatch {
		select {
		case w, ok := <-s.queue:
			if !ok {
				return batch
			}
			batch = append(batch, w)
			continue
		default:
		}
		wait := min(gap, time.Until(deadline))
		if wait <= 0 {
			return batch
		}
		t.Reset(wait)
		select {
		case w, ok := <-s.queue:
			t.Stop()
			if !ok {
				return batch
			}
			batch = append(batch, w)
		case <-t.C:
			return batch
		}
	}
	return batch
}

// commit runs a group's functions, logs their writes in one record and
// publishes them. A function that fails gets its error at once and leaves
// nothing behind.
func (s *Local) commit(batch []*write) {
	start := time.Now()
	if s.broken != nil {
		for _, w := range batch {
			w.err <- s.broken
		}
		return
	}
	btx, ls, err := s.snapshot()
	if err != nil {
		for _, w := range batch {
			w.err <- err
		}
		return
	}
	group, own := newLayer(), s.own
	ok := batch[:0]
	for _, w := range batch {
		own.reset()
		if err := w.fn(&localTx{btx: btx, layers: ls, batch: group, own: own}); err != nil {
			w.err <- err
			continue
		}
		group.absorb(own)
		ok = append(ok, w)
	}
	btx.Rollback()
	pages := 0
	if group.n > 0 {
		lg := s.logs[s.gen%2]
		n, err := lg.append(group)
		if err != nil {
			s.broken = fmt.Errorf("store stopped: %w", err)
			for _, w := range ok {
				w.err <- s.broken
			}
			return
		}
		pages = (n + 4095) / 4096
		group.gen = s.gen
		s.publish(group.freeze())
		if s.pending >= checkpointEntries || s.pendingBytes >= checkpointBytes || lg.off >= checkpointLog {
			s.startCheckpoint()
		}
	}
	for _, w := range ok {
		w.err <- nil
	}
	if fn := s.onCommit.Load(); fn != nil && len(ok) > 0 {
		(*fn)(len(ok), pages+s.ckptPages, time.Since(start))
		s.ckptPages = 0
	}
}

// publish makes l visible to readers, merging the newest layers of one
// generation while the one below is at most twice the newer's size, so
// that readers walk a few layers (sizes grow geometrically downwards) and
// each entry is merged a few times.
func (s *Local) publish(l *layer) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	old := *s.layers.Load()
	ls := append(make([]*layer, 0, len(old)+1), old...)
	ls = append(ls, l)
	for n := len(ls); n >= 2 && ls[n-2].gen == ls[n-1].gen && ls[n-2].n <= 2*ls[n-1].n; n = len(ls) {
		ls = append(ls[:n-2], merged(ls[n-2], ls[n-1]))
	}
	s.layers.Store(&ls)
	s.pending += l.n
	s.pendingBytes += l.bytes
}

// startCheckpoint moves the log on to the next generation (the other file,
// whose generation a finished checkpoint absorbed) and starts moving the
// generation just closed into the store file. One runs at a time.
func (s *Local) startCheckpoint() {
	if s.ckpt != nil || s.pending == 0 || s.broken != nil {
		return
	}
	g := s.gen
	if err := s.logs[(g+1)%2].reset(g + 1); err != nil {
		s.broken = fmt.Errorf("store stopped: %w", err)
		return
	}
	s.gen, s.pending, s.pendingBytes = g+1, 0, 0
	var ls []*layer
	for _, l := range *s.layers.Load() {
		if l.gen <= g {
			ls = append(ls, l)
		}
	}
	ch := make(chan ckptResult, 1)
	s.ckpt = ch
	go func() {
		var r ckptResult
		run := func() { r.pages, r.err = s.checkpoint(g, ls) }
		if around := s.around.Load(); around != nil {
			(*around)(run)
		} else {
			run()
		}
		ch <- r
	}()
}

// finished takes a checkpoint's outcome.
func (s *Local) finished(r ckptResult) {
	s.ckpt = nil
	s.ckptPages += r.pages
	if r.err != nil && s.broken == nil {
		s.broken = fmt.Errorf("store stopped: %w", r.err)
	}
}

// checkpoint moves generation g's layers (and any older) into the store
// file in one synced bbolt commit that also records g as absorbed, then
// drops them from what readers walk. A crash before the commit replays
// g's log file; after it, the file already holds g and the log's copy is
// skipped.
func (s *Local) checkpoint(g uint64, ls []*layer) (int, error) {
	var written *bolt.Tx
	err := s.db.Update(func(tx *bolt.Tx) error {
		written = tx
		for _, l := range ls {
			if err := l.apply(tx); err != nil {
				return err
			}
		}
		return putAbsorbed(tx, g)
	})
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	s.lmu.Lock()
	var keep []*layer
	for _, l := range *s.layers.Load() {
		if l.gen > g {
			keep = append(keep, l)
		}
	}
	s.layers.Store(&keep)
	s.lmu.Unlock()
	st := written.Stats() // kept by a committed transaction
	return int(st.GetWrite()), nil
}

// localTx is one transaction of a Local store: msgpack records by bucket
// and key, read from the writer's own changes, those of earlier writers in
// its group, the published layers and the store file, newest first.
type localTx struct {
	btx    *bolt.Tx
	layers []*layer // published, oldest first
	batch  *layer   // the group's earlier writers (nil in View)
	own    *layer   // this writer's changes (nil in View)
}

// levels are the tx's layers, oldest first.
func (t *localTx) levels() []*layer {
	ls := t.layers
	if t.own != nil {
		ls = append(slices.Clip(ls), t.batch, t.own)
	}
	return ls
}

// raw returns the stored bytes at key (valid until the tx ends).
func (t *localTx) raw(b Bucket, key []byte) []byte {
	e, ok := t.layered(b, key)
	if !ok {
		return t.fromFile(b, key)
	}
	if e.del {
		return nil
	}
	return e.val
}

// layered returns key's newest entry in the tx's layers, if one has it.
func (t *localTx) layered(b Bucket, key []byte) (entry, bool) {
	found := func(l *layer) (entry, bool) {
		if l == nil {
			return entry{}, false
		}
		return l.get(b, key)
	}
	e, ok := found(t.own)
	if !ok {
		e, ok = found(t.batch)
	}
	for i := len(t.layers) - 1; i >= 0 && !ok; i-- {
		e, ok = found(t.layers[i])
	}
	return e, ok
}

// fromFile returns key's bytes in the tx's store-file snapshot.
func (t *localTx) fromFile(b Bucket, key []byte) []byte { return t.btx.Bucket([]byte(b)).Get(key) }

// fileVersion names the tx's store-file snapshot: bbolt's transaction id,
// which only a checkpoint's commit moves on. Two snapshots of one version
// hold the same bytes at every key.
func (t *localTx) fileVersion() int { return t.btx.ID() }

// Read returns key's stored bytes. A key that no layer holds reads the
// file, whose bytes change only when a checkpoint commits a new version:
// the version returned names it, and a later Read that saw the key at the
// same version is told so (same) without the file being searched again.
func (t *localTx) Read(b Bucket, key []byte, seen uint64) (raw []byte, version uint64, same bool) {
	if e, ok := t.layered(b, key); ok {
		if e.del {
			return nil, 0, false
		}
		return e.val, 0, false
	}
	version = uint64(t.fileVersion()) + 1
	if seen == version {
		return nil, version, true
	}
	return t.fromFile(b, key), version, false
}

// Get decodes the record at key into v and reports whether it exists.
func (t *localTx) Get(b Bucket, key []byte, v any) (bool, error) {
	raw := t.raw(b, key)
	if raw == nil {
		return false, nil
	}
	if err := msgpack.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("decode %s/%q: %w", b, key, err)
	}
	return true, nil
}

// Put encodes v and stores it at key.
func (t *localTx) Put(b Bucket, key []byte, v any) error {
	_, err := t.PutBytes(b, key, v)
	return err
}

// PutBytes is Put, returning the stored bytes (never changed afterwards).
func (t *localTx) PutBytes(b Bucket, key []byte, v any) ([]byte, error) {
	raw, err := Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%q: %w", b, key, err)
	}
	return raw, t.set(b, key, entry{val: raw})
}

// Delete removes key.
func (t *localTx) Delete(b Bucket, key []byte) error {
	return t.set(b, key, entry{del: true})
}

func (t *localTx) set(b Bucket, key []byte, e entry) error {
	if t.own == nil {
		return bolt.ErrTxNotWritable
	}
	if err := CheckKey(key, len(e.val)); err != nil {
		return fmt.Errorf("%s/%q: %w", b, key, err)
	}
	t.own.set(b, string(key), e)
	return nil
}

// Scan calls fn on the records whose keys start with prefix and come after
// from (from itself excluded; nil starts at the prefix), in key order, until
// fn returns false.
func (t *localTx) Scan(b Bucket, prefix, from []byte, fn func(key, raw []byte) (bool, error)) error {
	seek := prefix
	if from != nil {
		seek = from
	}
	// The layers' entries in range, newest value of each key.
	var over map[string]entry
	for _, l := range t.levels() {
		l.inRange(b, string(prefix), string(seek), func(k string, e entry) {
			if over == nil {
				over = map[string]entry{}
			}
			over[k] = e
		})
	}
	keys := slices.Sorted(maps.Keys(over))
	c := t.btx.Bucket([]byte(b)).Cursor()
	k, v := c.Seek(seek)
	inPrefix := func(k []byte) bool { return k != nil && bytes.HasPrefix(k, prefix) }
	for {
		var key, raw []byte
		switch {
		case len(keys) > 0 && (!inPrefix(k) || keys[0] <= string(k)):
			if inPrefix(k) && keys[0] == string(k) {
				k, v = c.Next() // the layer's value replaces the file's
			}
			e := over[keys[0]]
			key, keys = []byte(keys[0]), keys[1:]
			if e.del {
				continue
			}
			raw = e.val
		case inPrefix(k):
			key, raw = k, v
			k, v = c.Next()
		default:
			return nil
		}
		if from != nil && bytes.Equal(key, from) {
			continue
		}
		more, err := fn(key, raw)
		if err != nil || !more {
			return err
		}
	}
}

// recEncoder is a msgpack encoder with its buffer, kept for reuse:
// msgpack.Marshal grows a fresh buffer from nothing for every record, which
// was a sixth of what the service allocated under load.
type recEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(recEncoder)
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

// Marshal encodes a record as every store keeps it: msgpack, into a reused
// buffer copied out at its size (an Operation by its own codec).
func Marshal(v any) ([]byte, error) {
	if op, ok := v.(*Operation); ok {
		return op.marshal(), nil
	}
	e := encoders.Get().(*recEncoder)
	defer encoders.Put(e)
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// Decode decodes one raw record handed to a Scan callback.
func Decode(raw []byte, v any) error { return msgpack.Unmarshal(raw, v) }
