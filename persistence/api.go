package persistence

import "time"

// Store is what the grains need of durable state: writes serialised in a
// commit loop, each acknowledged only once durable, and reads of the last
// committed state. Local (a write-ahead log in front of bbolt, one node's
// file) is its implementation; the grains see only this interface.
type Store interface {
	// Update runs fn in a write transaction: fn's writes are durable when
	// Update returns nil, and discarded whole when fn fails. Writes run one
	// after another, each seeing those before it; fn must not have effects
	// outside tx.
	Update(fn func(Tx) error) error
	// View runs fn in a read-only transaction over committed state.
	View(fn func(Tx) error) error
	// OnCommit sets fn to be told of every group commit (writes carried,
	// pages written, time taken).
	OnCommit(fn func(writes, pages int, took time.Duration))
	Close() error
}

// Tx is one transaction: msgpack records by bucket and key.
type Tx interface {
	// Get decodes the record at key into v and reports whether it exists.
	Get(b Bucket, key []byte, v any) (bool, error)
	// Put encodes v and stores it at key.
	Put(b Bucket, key []byte, v any) error
	// PutBytes is Put, returning the stored bytes (never changed afterwards).
	PutBytes(b Bucket, key []byte, v any) ([]byte, error)
	// Delete removes key.
	Delete(b Bucket, key []byte) error
	// Scan calls fn on the records whose keys start with prefix, from key
	// from on (nil: the first), in key order, until fn returns false.
	Scan(b Bucket, prefix, from []byte, fn func(key, raw []byte) (bool, error)) error
	// Read returns key's stored bytes, and a version that a later Read may
	// pass as seen: when the bytes are still those seen at that version,
	// it reports same instead of reading them (a Memo then keeps its
	// decoded value). Version 0 promises nothing.
	Read(b Bucket, key []byte, seen uint64) (raw []byte, version uint64, same bool)
}

var _ Store = (*Local)(nil)
var _ Tx = (*localTx)(nil)
