package persistence

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// SecretPath is where the node keeps its key called name by default:
// secrets/<name>.key under the data folder.
func SecretPath(dataDir, name string) string {
	return filepath.Join(dataDir, "secrets", name+".key")
}

// Secret returns the 32-byte key in the file at path, making it at random
// (owner-only) the first time. Nodes that share a key file share the key;
// an operator may also provide the file (from a secret store) beforehand.
func Secret(path string) ([]byte, error) {
	if key, err := os.ReadFile(path); err == nil {
		if len(key) != 32 {
			return nil, fmt.Errorf("secret %s: %d bytes, want 32", path, len(key))
		}
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		return Secret(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

// Signed-link failures.
var (
	ErrExpired      = errors.New("the link has expired")
	ErrBadSignature = errors.New("the link's signature does not match")
)

// Signer makes and checks signed download links: an HMAC-SHA256, under the
// node's signing key, of the path and the expiry, so that neither can be
// changed and a link works for anyone who holds it until it expires.
type Signer struct{ key []byte }

// NewSigner signs with key.
func NewSigner(key []byte) *Signer { return &Signer{key} }

func (s *Signer) mac(path string, expires int64) []byte {
	m := hmac.New(sha256.New, s.key)
	fmt.Fprintf(m, "GET\n%s\n%d", path, expires)
	return m.Sum(nil)
}

// Sign returns the signature of a link to path that ends at expires.
func (s *Signer) Sign(path string, expires time.Time) string {
	return hex.EncodeToString(s.mac(path, expires.Unix()))
}

// Verify checks a link's signature (in constant time) and then its expiry.
func (s *Signer) Verify(path, expires, signature string, now time.Time) error {
	exp, err := strconv.ParseInt(expires, 10, 64)
	sig, herr := hex.DecodeString(signature)
	if err != nil || herr != nil || !hmac.Equal(sig, s.mac(path, exp)) {
		return ErrBadSignature
	}
	if now.Unix() >= exp {
		return ErrExpired
	}
	return nil
}
