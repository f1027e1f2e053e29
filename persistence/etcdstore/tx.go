package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/wts-project/wts/persistence"
)

// tx is one writer's transaction in a group, or a View.
type tx struct {
	s    *Store
	g    *group           // nil in a View
	own  map[string]entry // this writer's changes (nil in a View)
	view bool
	rev  int64 // a View's revision, from its first read (0 before)
	// err is a failed Read, which has no error of its own: the View or
	// the writer then fails with it, whatever fn made of the absent record.
	err error
}

var errReadOnly = errors.New("etcdstore: write in a View")

// lookup finds key k: this writer's changes, the group's, what the group
// read, the cache, then etcd. What comes from the cache or etcd joins the
// group's reads, which its commit checks.
func (t *tx) lookup(k string) (entry, error) {
	if t.view {
		raw, mod, at, err := t.s.get(k, t.rev)
		if t.rev == 0 {
			t.rev = at
		}
		return entry{raw: raw, mod: mod}, err
	}
	if e, ok := t.own[k]; ok {
		return e, nil
	}
	if e, ok := t.g.over[k]; ok {
		return e, nil
	}
	if e, ok := t.g.reads[k]; ok {
		return e, nil
	}
	e, ok := t.s.cache.get(k)
	if !ok {
		raw, mod, _, err := t.s.get(k, 0)
		if err != nil {
			return entry{}, err
		}
		e = entry{raw: raw, mod: mod}
	}
	t.g.reads[k] = e
	return e, nil
}

// Read returns key's stored bytes and etcd's modification revision of
// them (0 for a write of this group): one revision names one content, so
// a reader that saw it is told the bytes are the same.
func (t *tx) Read(b persistence.Bucket, key []byte, seen uint64) (raw []byte, version uint64, same bool) {
	e, err := t.lookup(t.s.key(b, key))
	if err != nil {
		t.err = err
		return nil, 0, false
	}
	if e.mod != 0 && uint64(e.mod) == seen {
		return nil, seen, true
	}
	return e.raw, uint64(e.mod), false
}

// Get decodes the record at key into v and reports whether it exists.
func (t *tx) Get(b persistence.Bucket, key []byte, v any) (bool, error) {
	e, err := t.lookup(t.s.key(b, key))
	if err != nil || e.raw == nil {
		return false, err
	}
	if err := msgpack.Unmarshal(e.raw, v); err != nil {
		return true, fmt.Errorf("decode %s/%q: %w", b, key, err)
	}
	return true, nil
}

// Put encodes v and stores it at key.
func (t *tx) Put(b persistence.Bucket, key []byte, v any) error {
	_, err := t.PutBytes(b, key, v)
	return err
}

// PutBytes is Put, returning the stored bytes.
func (t *tx) PutBytes(b persistence.Bucket, key []byte, v any) ([]byte, error) {
	if t.view {
		return nil, errReadOnly
	}
	raw, err := persistence.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%q: %w", b, key, err)
	}
	if err := persistence.CheckKey(key, len(raw)); err != nil {
		return nil, fmt.Errorf("%s/%q: %w", b, key, err)
	}
	stored, err := t.s.blobs.store(raw)
	if err != nil {
		return nil, fmt.Errorf("%s/%q: %w", b, key, err)
	}
	t.own[t.s.key(b, key)] = entry{raw: raw, stored: stored}
	return raw, nil
}

// Delete removes key.
func (t *tx) Delete(b persistence.Bucket, key []byte) error {
	if t.view {
		return errReadOnly
	}
	if err := persistence.CheckKey(key, 0); err != nil {
		return fmt.Errorf("%s/%q: %w", b, key, err)
	}
	t.own[t.s.key(b, key)] = entry{}
	return nil
}

// Scan calls fn on the records whose keys start with prefix and come after
// from (nil: all of them), in key order, until fn returns false: etcd's
// range, with the group's and this writer's changes over it. In a writer,
// the commit checks that no key of the range has changed since.
func (t *tx) Scan(b persistence.Bucket, prefix, from []byte, fn func(key, raw []byte) (bool, error)) error {
	base := t.s.key(b, nil)
	lo, end := base+string(prefix), clientv3.GetPrefixRangeEnd(base+string(prefix))
	if from != nil {
		lo = base + string(from)
	}
	c, cancel := context.WithTimeout(context.Background(), transientFor)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if t.view && t.rev > 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	var resp *clientv3.GetResponse
	err := again(func() (err error) {
		resp, err = t.s.cli.Get(c, lo, opts...)
		return err
	})
	if err != nil {
		return fmt.Errorf("scan %s/%q: %w", b, prefix, err)
	}
	if t.view && t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	if !t.view {
		t.g.ranges = append(t.g.ranges, span{from: lo, end: end, rev: resp.Header.Revision})
	}
	// The changes in range, newest of each key, over etcd's records.
	over := map[string]entry{}
	if !t.view {
		for _, m := range []map[string]entry{t.g.over, t.own} {
			for k, e := range m {
				if k >= lo && k < end {
					over[k] = e
				}
			}
		}
	}
	keys := slices.Sorted(maps.Keys(over))
	kvs := resp.Kvs
	for len(keys) > 0 || len(kvs) > 0 {
		var k string
		var raw []byte
		switch {
		case len(keys) > 0 && (len(kvs) == 0 || keys[0] <= string(kvs[0].Key)):
			if len(kvs) > 0 && keys[0] == string(kvs[0].Key) {
				kvs = kvs[1:] // the change replaces etcd's record
			}
			k, raw, keys = keys[0], over[keys[0]].raw, keys[1:]
			if raw == nil {
				continue
			}
		default:
			k = string(kvs[0].Key)
			if raw, err = t.s.blobs.resolve(kvs[0].Value); err != nil {
				return err
			}
			kvs = kvs[1:]
		}
		key := []byte(strings.TrimPrefix(k, base))
		if from != nil && bytes.Equal(key, from) {
			continue
		}
		more, err := fn(key, raw)
		if err != nil || !more {
			return err
		}
	}
	return nil
}
