// Package auth issues and checks API keys. A key is
// svc_test_<16 hex id><32 hex secret> (or svc_live_...); the store keeps
// only its id, its SHA-256 and its tenant, and a presented key is compared
// with the stored hash in constant time.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/wts-project/wts/persistence"
)

// Key prefixes.
const (
	TestPrefix = "svc_test_"
	LivePrefix = "svc_live_"
)

const (
	idLen     = 16 // hex digits of the key id
	secretLen = 32 // hex digits of the secret
)

// ErrInvalid is any key that does not authenticate; callers learn no more.
var ErrInvalid = errors.New("invalid API key")

// Create issues a key for an organization and stores its hash. The key is
// returned once and never stored.
func Create(st persistence.Store, org string, live bool, now time.Time) (string, error) {
	if org == "" {
		return "", fmt.Errorf("organization name is empty")
	}
	var b [(idLen + secretLen) / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	prefix := TestPrefix
	if live {
		prefix = LivePrefix
	}
	key := prefix + hex.EncodeToString(b[:])
	id := key[len(prefix) : len(prefix)+idLen]
	sum := sha256.Sum256([]byte(key))
	rec := persistence.Key{ID: id, Tenant: persistence.Tenant{Org: org, Live: live}, Hash: sum[:], CreatedAt: now.UTC()}
	err := st.Update(func(tx persistence.Tx) error {
		var old persistence.Key
		if ok, err := tx.Get(persistence.Keys, []byte(id), &old); err != nil || ok {
			if err == nil {
				err = fmt.Errorf("key id collision")
			}
			return err
		}
		return tx.Put(persistence.Keys, []byte(id), &rec)
	})
	if err != nil {
		return "", fmt.Errorf("store key: %w", err)
	}
	return key, nil
}

// Keys checks presented keys against the store. Key records never change
// once created (there is no revocation yet), so it keeps each one it has
// read: checking a request's key was a store read and a msgpack decode on
// every request. Only found keys are kept, so a key
// made a moment ago (by another process, through the admin socket) is
// found on its first use. Revocation, when it comes, must drop the entry.
type Keys struct {
	st   persistence.Store
	seen sync.Map // key id → persistence.Key
}

// NewKeys checks keys against st.
func NewKeys(st persistence.Store) *Keys { return &Keys{st: st} }

// Check returns the tenant of a presented key. The hash is compared on
// every call, cached record or not, in constant time.
func (k *Keys) Check(key string) (persistence.Tenant, error) {
	var live bool
	var rest string
	switch {
	case strings.HasPrefix(key, TestPrefix):
		rest = key[len(TestPrefix):]
	case strings.HasPrefix(key, LivePrefix):
		rest, live = key[len(LivePrefix):], true
	default:
		return persistence.Tenant{}, ErrInvalid
	}
	if len(rest) != idLen+secretLen {
		return persistence.Tenant{}, ErrInvalid
	}
	rec, ok, err := k.lookup(rest[:idLen])
	if err != nil {
		return persistence.Tenant{}, err
	}
	sum := sha256.Sum256([]byte(key))
	if !ok {
		rec.Hash = make([]byte, len(sum)) // compare anyway: no timing difference for unknown ids
	}
	if subtle.ConstantTimeCompare(sum[:], rec.Hash) != 1 || !ok || rec.Tenant.Live != live {
		return persistence.Tenant{}, ErrInvalid
	}
	return rec.Tenant, nil
}

// lookup returns the stored record of key id.
func (k *Keys) lookup(id string) (persistence.Key, bool, error) {
	if rec, ok := k.seen.Load(id); ok {
		return rec.(persistence.Key), true, nil
	}
	var rec persistence.Key
	var ok bool
	err := k.st.View(func(tx persistence.Tx) (err error) {
		ok, err = tx.Get(persistence.Keys, []byte(id), &rec)
		return err
	})
	if err == nil && ok {
		k.seen.Store(id, rec)
	}
	return rec, ok, err
}
