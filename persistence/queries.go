package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The store's shared query shapes: what more than one grain (or the node's
// reads) does with its records.

// Each decodes the records of bucket b whose keys start with prefix, from
// start on (nil: the first), in key order, each into a fresh T, and calls
// fn with its key and record until fn says to stop. The key is the
// store's: copy it to keep it.
func Each[T any](tx Tx, b Bucket, prefix, start []byte, fn func(key []byte, v *T) (bool, error)) error {
	return tx.Scan(b, prefix, start, func(k, raw []byte) (bool, error) {
		v := new(T)
		if err := Decode(raw, v); err != nil {
			return false, err
		}
		return fn(k, v)
	})
}

// ScanOps calls fn on the operations of owner (a run or a sampler) after
// seq after, in seq order.
func ScanOps(tx Tx, owner string, after int64, fn func(*Operation) error) error {
	return Each(tx, Ops, []byte(owner), SeqKey(owner, after), func(_ []byte, op *Operation) (bool, error) {
		return true, fn(op)
	})
}

// Once stores fresh (whose id is id) in bucket b the first time the
// request key is seen, and later reads back what that first time stored; it
// says whether this call stored it (or, with an error, tried to). hash is
// the request's body hash: a later request with the same key and another
// body is refused with ErrRequestReused. admit, when set, may refuse a new
// record before anything is written (a limit).
func Once[T any](tx Tx, key []byte, b Bucket, id, hash string, fresh *T, admit func() error) (*T, bool, error) {
	var prev string
	if ok, err := tx.Get(Requests, key, &prev); err != nil || ok {
		if err != nil {
			return nil, false, err
		}
		prevID, prevHash, _ := strings.Cut(prev, "\x00")
		if !SameRequest(prevHash, hash) {
			return nil, false, ErrRequestReused
		}
		v := new(T)
		_, err := tx.Get(b, []byte(prevID), v)
		return v, false, err
	}
	if admit != nil {
		if err := admit(); err != nil {
			return nil, false, err
		}
	}
	if err := tx.Put(Requests, key, id+"\x00"+hash); err != nil {
		return nil, true, err
	}
	return fresh, true, tx.Put(b, []byte(id), fresh)
}

// ListedKey is the key of a tenant's session or run (kind) in Listed: a
// walk of the bucket from the tenant's and kind's prefix meets them newest
// first, by creation time and then id.
func ListedKey(t Tenant, kind string, created time.Time, id string) []byte {
	return fmt.Appendf(ListedPrefix(t, kind), "%016x\x00%s", ^uint64(created.UnixMilli()), id)
}

// ListedPrefix starts every Listed key of tenant t's records of kind.
func ListedPrefix(t Tenant, kind string) []byte {
	return fmt.Appendf(TenantKey(t), "\x00%s\x00", kind)
}

// List indexes a new record of tenant t for its listing (ListedKey).
func List(tx Tx, t Tenant, kind string, created time.Time, id string) error {
	return tx.Put(Listed, ListedKey(t, kind, created, id), true)
}

// Listing reads the ids of up to limit of tenant t's records of kind,
// newest first, from after the one whose ListedKey is after (nil: from the
// newest).
func Listing(tx Tx, t Tenant, kind string, after []byte, limit int) ([]string, error) {
	prefix := ListedPrefix(t, kind)
	var start []byte
	if after != nil {
		start = append(append([]byte{}, after...), 0) // the first key past it
	}
	var ids []string
	err := tx.Scan(Listed, prefix, start, func(k, _ []byte) (bool, error) {
		_, id, _ := bytes.Cut(k[len(prefix):], []byte{0})
		ids = append(ids, string(id))
		return len(ids) < limit, nil
	})
	return ids, err
}

// IndexListings lists every session and run a store written before their
// listing entries were kept (List); it writes only what is missing.
func IndexListings(st Store) error {
	type listed struct {
		ID        string    `msgpack:"id"`
		Tenant    Tenant    `msgpack:"tenant"`
		CreatedAt time.Time `msgpack:"created_at"`
	}
	kinds := map[Bucket]string{Sessions: "session", Runs: "run"}
	var todo [][]byte
	err := st.View(func(tx Tx) error {
		for b, kind := range kinds {
			err := Each(tx, b, nil, nil, func(_ []byte, r *listed) (bool, error) {
				key := ListedKey(r.Tenant, kind, r.CreatedAt, r.ID)
				ok, err := tx.Get(Listed, key, new(bool))
				if err == nil && !ok {
					todo = append(todo, key)
				}
				return err == nil, err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for len(todo) > 0 && err == nil {
		chunk := todo[:min(len(todo), 100)] // a cluster store bounds the writes of one transaction
		todo = todo[len(chunk):]
		err = st.Update(func(tx Tx) error {
			for _, key := range chunk {
				if err := tx.Put(Listed, key, true); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return err
}

// ErrRequestReused refuses a request_id seen before with another body.
var ErrRequestReused = errors.New("the request_id was used before with another body")

// SameRequest reports whether two body hashes of one request_id name the
// same request. A record written before bodies were hashed has none, and
// matches any.
func SameRequest(stored, hash string) bool {
	return stored == "" || hash == "" || stored == hash
}

// TenantKey is the key that starts tenant t's records in a keyspace
// shared by tenants.
func TenantKey(t Tenant) []byte {
	return fmt.Appendf(nil, "%s\x00%t", t.Org, t.Live)
}

// RequestKey is the request_id index key of a creation in a scope.
func RequestKey(t Tenant, scope, requestID string) []byte {
	return fmt.Appendf(TenantKey(t), "\x00%s\x00%s", scope, requestID)
}
