package persistence

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Memo keeps one record's decoding between transactions, for a reader that
// reads the same key again and again, mostly records it wrote itself (a
// grain's Head, its queued operations, its run's lease): it decodes again
// only when the stored bytes are not those it last decoded or wrote. At 64
// clients, grains re-reading such records inside the commit loop spent ~4%
// of the service's CPU decoding msgpack.
//
// Every read checks the stored bytes, so a memo is never wrong, only
// missed: a write that failed, or another writer, leaves bytes the memo does
// not hold. A record that has moved into the store file is checked there
// once per version of the file (see Get). The zero Memo holds nothing.
type Memo[T any] struct {
	raw []byte
	val T
	// file is the version Tx.Read gave with raw (0 when raw came from a
	// write): a later read of the same version is told the bytes are still
	// these.
	file uint64
}

// Get reads the record at key through m and reports whether it exists. The
// value shares its slices, maps and pointers with the memo: change its
// fields by assignment only, never what they point to.
//
// A key that no layer holds reads the file, whose bytes change only when a
// checkpoint commits a new version. When the memo last found the key in the
// same version, those are its bytes, and the file is not searched again:
// grains re-read records that checkpoints moved there (a run's session, an
// operation queued before the last checkpoint) in every write: at 64
// clients the run's session alone was 23,000 of the 75,000 store-file
// searches of 30,000 submissions.
func (m *Memo[T]) Get(tx Tx, b Bucket, key []byte) (T, bool, error) {
	raw, version, same := tx.Read(b, key, m.file)
	if same && m.raw != nil {
		return m.val, true, nil
	}
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
	m.file = version
	return m.val, true, nil
}

// Put stores v at key, as Tx.Put does, and keeps it in m.
func (m *Memo[T]) Put(tx Tx, b Bucket, key []byte, v T) error {
	raw, err := tx.PutBytes(b, key, &v)
	if err != nil {
		return err
	}
	m.raw, m.val, m.file = raw, v, 0
	return nil
}

// Size is the bytes of the record the memo holds (its decoded value holds
// about as much again).
func (m *Memo[T]) Size() int { return len(m.raw) }
