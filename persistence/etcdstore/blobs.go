package etcdstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wts-project/wts/persistence"
)

// BlobAbove is the largest record etcd holds itself; a larger one (an
// operation's payload of many tokens) goes to a file on the shared volume,
// named by its SHA-256, and etcd holds the hash. etcd wants requests of at
// most ~1.5 MB and a database of a few GB.
const BlobAbove = 64 << 10

// A stored value's first byte says what follows.
const (
	inline byte = 'v' // the record
	blob   byte = 'b' // the SHA-256 of the record's file
)

// blobs are the content-addressed files of records above BlobAbove.
type blobs struct{ dir string }

func (b blobs) path(sum []byte) string {
	h := fmt.Sprintf("%x", sum)
	return filepath.Join(b.dir, h[:2], h)
}

// store returns what etcd keeps for raw, writing raw's file first (and
// syncing it and its folder) when it goes to one. A file already there
// holds the same bytes.
func (b blobs) store(raw []byte) ([]byte, error) {
	if len(raw) <= BlobAbove {
		return append([]byte{inline}, raw...), nil
	}
	sum := sha256.Sum256(raw)
	path := b.path(sum[:])
	if _, err := os.Stat(path); err == nil {
		return append([]byte{blob}, sum[:]...), nil
	}
	if err := persistence.WriteFile(path, raw); err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	return append([]byte{blob}, sum[:]...), nil
}

// resolve returns the record a stored value holds.
func (b blobs) resolve(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, errors.New("blob: empty stored value")
	}
	switch v[0] {
	case inline:
		return v[1:], nil
	case blob:
		raw, err := os.ReadFile(b.path(v[1:]))
		if err != nil {
			return nil, fmt.Errorf("blob: %w", err)
		}
		if sum := sha256.Sum256(raw); string(sum[:]) != string(v[1:]) {
			return nil, fmt.Errorf("blob %x: content does not match its name", v[1:])
		}
		return raw, nil
	}
	return nil, fmt.Errorf("blob: unknown stored value tag %q", v[0])
}
