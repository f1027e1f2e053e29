package etcdstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

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
	h := blobName(sum)
	return filepath.Join(b.dir, h[:2], h)
}

// blobName is a blob file's name: its SHA-256 in hex.
func blobName(sum []byte) string { return hex.EncodeToString(sum) }

// store returns what etcd keeps for raw, writing raw's file first (and
// syncing it and its folder) when it goes to one. A file already there
// holds the same bytes.
func (b blobs) store(raw []byte) ([]byte, error) {
	if len(raw) <= BlobAbove {
		return append([]byte{inline}, raw...), nil
	}
	sum := sha256.Sum256(raw)
	path := b.path(sum[:])
	if now := time.Now(); os.Chtimes(path, now, now) == nil {
		// There already, and now recent: the collector leaves it (collect).
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

// collect removes the blob files that no record refers to, of those
// untouched for grace: a file is written (or, reused, touched) before the
// transaction that refers to it commits, so one younger than grace may
// belong to a transaction still under way. refs says whether a hash is
// referred to; it must be read after the files were listed. A file is
// moved aside before it goes, and put back if it was touched meanwhile
// (reused by a writer that found it there just before).
func (b blobs) collect(grace time.Duration, list func() (map[string]bool, error)) (removed int, err error) {
	cutoff := time.Now().Add(-grace)
	var old []string
	err = filepath.WalkDir(b.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || len(d.Name()) != 2*sha256.Size {
			return err
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(cutoff) {
			old = append(old, path)
		}
		return nil
	})
	if err != nil || len(old) == 0 {
		return 0, err
	}
	refs, err := list()
	if err != nil {
		return 0, err
	}
	for _, path := range old {
		if refs[filepath.Base(path)] {
			continue
		}
		aside := path + ".collect"
		if err := os.Rename(path, aside); err != nil {
			continue // gone already (another node's collector)
		}
		if info, err := os.Stat(aside); err == nil && !info.ModTime().Before(cutoff) {
			os.Rename(aside, path) // reused meanwhile
			continue
		}
		if err := os.Remove(aside); err == nil {
			removed++
		}
	}
	return removed, nil
}
