package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// entry is a key's value in a layer; del marks a deletion, which hides the
// key in every older layer and in the store file.
type entry struct {
	val []byte
	del bool
}

// layer is a set of writes keyed by bucket and key, each key's last value:
// one writer's while its function runs, a group commit's (immutable once
// published, and then also its log record), or several published ones
// merged. Readers see the published layers over the store file until a
// checkpoint moves them into it.
type layer struct {
	buckets map[Bucket]*bucketLayer
	n       int    // entries over all buckets
	bytes   int    // keys and values, roughly (a group's; merges do not count)
	gen     uint64 // the log generation holding it, once published
}

type bucketLayer struct {
	m    map[string]entry
	keys []string // m's keys, sorted; nil while stale
}

func newLayer() *layer { return &layer{buckets: map[Bucket]*bucketLayer{}} }

func (l *layer) get(b Bucket, key []byte) (entry, bool) {
	bl := l.buckets[b]
	if bl == nil {
		return entry{}, false
	}
	e, ok := bl.m[string(key)]
	return e, ok
}

func (l *layer) set(b Bucket, key string, e entry) {
	bl := l.buckets[b]
	if bl == nil {
		bl = &bucketLayer{m: map[string]entry{}}
		l.buckets[b] = bl
	}
	if old, ok := bl.m[key]; ok {
		l.bytes -= len(old.val)
	} else {
		l.n++
		l.bytes += len(key)
		bl.keys = nil
	}
	bl.m[key] = e
	l.bytes += len(e.val)
}

// reset empties l, keeping its maps' room: the commit loop reuses one layer
// for each writer's own changes in turn (its entries are copied into the
// group's by absorb), rather than growing fresh maps for every write.
func (l *layer) reset() {
	for _, bl := range l.buckets {
		clear(bl.m)
		bl.keys = nil
	}
	l.n, l.bytes = 0, 0
}

// absorb lays o's entries over l's.
func (l *layer) absorb(o *layer) {
	for b, bl := range o.buckets {
		for k, e := range bl.m {
			l.set(b, k, e)
		}
	}
}

// sorted returns bucket b's keys in order (sorting them if a write made
// them stale; published layers are sorted once, by freeze).
func (l *layer) sorted(b Bucket) []string {
	bl := l.buckets[b]
	if bl == nil {
		return nil
	}
	if bl.keys == nil {
		bl.keys = slices.Sorted(maps.Keys(bl.m))
	}
	return bl.keys
}

// freeze readies l to be published: from then on it is only read, by
// any number of goroutines.
func (l *layer) freeze() *layer {
	for b := range l.buckets {
		l.sorted(b)
	}
	return l
}

// merged returns one frozen layer holding older with newer laid over it
// (both of one generation, both frozen). Its maps are sized up front and its
// sorted keys merged from theirs: merges were the store's largest source of
// garbage after the records themselves.
func merged(older, newer *layer) *layer {
	m := &layer{buckets: make(map[Bucket]*bucketLayer, len(older.buckets)+len(newer.buckets)), gen: newer.gen}
	for b := range older.buckets {
		if newer.buckets[b] == nil {
			m.buckets[b] = older.buckets[b] // immutable: shared
		}
	}
	for b, nb := range newer.buckets {
		ob := older.buckets[b]
		if ob == nil {
			m.buckets[b] = nb
			continue
		}
		bl := &bucketLayer{m: make(map[string]entry, len(ob.m)+len(nb.m)), keys: make([]string, 0, len(ob.m)+len(nb.m))}
		maps.Copy(bl.m, ob.m)
		maps.Copy(bl.m, nb.m)
		i, j := 0, 0
		for i < len(ob.keys) || j < len(nb.keys) {
			switch {
			case j == len(nb.keys) || i < len(ob.keys) && ob.keys[i] < nb.keys[j]:
				bl.keys = append(bl.keys, ob.keys[i])
				i++
			case i == len(ob.keys) || nb.keys[j] < ob.keys[i]:
				bl.keys = append(bl.keys, nb.keys[j])
				j++
			default: // in both
				bl.keys = append(bl.keys, nb.keys[j])
				i, j = i+1, j+1
			}
		}
		m.buckets[b] = bl
	}
	for _, bl := range m.buckets {
		m.n += len(bl.m)
	}
	return m
}

// inRange calls fn on l's entries of bucket b whose keys start with prefix
// and are at or after start, in key order.
func (l *layer) inRange(b Bucket, prefix, start string, fn func(key string, e entry)) {
	keys := l.sorted(b)
	i, _ := slices.BinarySearch(keys, start)
	for ; i < len(keys) && strings.HasPrefix(keys[i], prefix); i++ {
		fn(keys[i], l.buckets[b].m[keys[i]])
	}
}

// apply writes l into a store-file transaction. It yields every 128
// entries: a checkpoint applies thousands (milliseconds of CPU in one go),
// and on a two-core node that took a processor from the requests for as
// long, which an execution trace showed as a stall in their latencies.
func (l *layer) apply(tx *bolt.Tx) error {
	for b, bl := range l.buckets {
		bk := tx.Bucket([]byte(b))
		if bk == nil {
			return fmt.Errorf("checkpoint: no bucket %q", b)
		}
		for i, k := range l.sorted(b) { // in order: appends fill pages
			if i%128 == 127 {
				runtime.Gosched()
			}
			e := bl.m[k]
			var err error
			if e.del {
				err = bk.Delete([]byte(k))
			} else {
				err = bk.Put([]byte(k), e.val)
			}
			if err != nil {
				return fmt.Errorf("checkpoint %s/%q: %w", b, k, err)
			}
		}
	}
	return nil
}

// CheckKey refuses a key or value that the store file would refuse at a
// checkpoint, when the writer can still be told. Every Store applies it, so
// that a record can move between them.
func CheckKey(key []byte, val int) error {
	switch {
	case len(key) == 0:
		return bolt.ErrKeyRequired
	case len(key) > bolt.MaxKeySize:
		return bolt.ErrKeyTooLarge
	case val > bolt.MaxValueSize:
		return bolt.ErrValueTooLarge
	}
	return nil
}

// Log record payload: per entry, a kind byte (opPut or opDelete), then the
// bucket, the key and, for a put, the value, each as a uvarint length and
// its bytes.
const (
	opPut    = 1
	opDelete = 2
)

var errBadRecord = errors.New("malformed log record")

// encode appends l's log record payload to buf.
func (l *layer) encode(buf []byte) []byte {
	for b, bl := range l.buckets {
		for k, e := range bl.m {
			kind := byte(opPut)
			if e.del {
				kind = opDelete
			}
			buf = append(buf, kind)
			buf = appendBytes(buf, []byte(b))
			buf = appendBytes(buf, []byte(k))
			if !e.del {
				buf = appendBytes(buf, e.val)
			}
		}
	}
	return buf
}

func appendBytes(buf, b []byte) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(b))), b...)
}

// decodeLayer reads a log record payload back into a layer.
func decodeLayer(p []byte) (*layer, error) {
	l := newLayer()
	for len(p) > 0 {
		kind := p[0]
		p = p[1:]
		if kind != opPut && kind != opDelete {
			return nil, fmt.Errorf("%w: entry kind %d", errBadRecord, kind)
		}
		var b, k, v []byte
		var err error
		if b, p, err = readBytes(p); err != nil {
			return nil, err
		}
		if k, p, err = readBytes(p); err != nil {
			return nil, err
		}
		e := entry{del: kind == opDelete}
		if !e.del {
			if v, p, err = readBytes(p); err != nil {
				return nil, err
			}
			e.val = v
		}
		if err := CheckKey(k, len(v)); err != nil {
			return nil, fmt.Errorf("%w: %v", errBadRecord, err)
		}
		l.set(Bucket(b), string(k), e)
	}
	return l.freeze(), nil
}

func readBytes(p []byte) (b, rest []byte, err error) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, fmt.Errorf("%w: length past its end", errBadRecord)
	}
	return p[w : w+int(n) : w+int(n)], p[w+int(n):], nil
}
