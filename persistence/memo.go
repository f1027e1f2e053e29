package persistence

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Memo keeps one record's decoding between transactions, for a reader that
// reads the same key again and again, mostly records it wrote itself (a
// grain's Head, its queued operations, its run's session): it decodes again
// only when the stored bytes are not those it last decoded or wrote. At 64
// clients, grains re-reading such records inside the commit loop spent ~4%
// of the service's CPU decoding msgpack.
//
// Every read checks the stored bytes, so a memo is never wrong, only
// missed: a write that failed, or another writer, leaves bytes the memo does
// not hold. The zero Memo holds nothing.
type Memo[T any] struct {
	raw []byte
	val T
}

// Get reads the record at key through m and reports whether it exists. The
// value shares its slices, maps and pointers with the memo: change its
// fields by assignment only, never what they point to.
func (m *Memo[T]) Get(tx *Tx, b Bucket, key []byte) (T, bool, error) {
	raw := tx.raw(b, key)
	if raw == nil {
		var zero T
		return zero, false, nil
	}
	if m.raw == nil || !bytes.Equal(raw, m.raw) {
		var v T
		if err := msgpack.Unmarshal(raw, &v); err != nil {
			return v, true, fmt.Errorf("decode %s/%q: %w", b, key, err)
		}
		m.raw, m.val = bytes.Clone(raw), v
	}
	return m.val, true, nil
}

// Put stores v at key, as Tx.Put does, and keeps it in m.
func (m *Memo[T]) Put(tx *Tx, b Bucket, key []byte, v T) error {
	raw, err := tx.put(b, key, &v)
	if err != nil {
		return err
	}
	m.raw, m.val = raw, v
	return nil
}
