package persistence

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Credential is a customer's secret for an outside service (a model hub
// token, or a provider key for byok funding), sealed with AES-256-GCM under the node's credentials key. The
// sealed bytes are bound to the record's id and owner, so a ciphertext moved
// to another record does not open. The secret is never returned by the API
// nor logged.
type Credential struct {
	ID        string    `msgpack:"id" json:"id"`
	Tenant    Tenant    `msgpack:"tenant" json:"-"`
	Kind      string    `msgpack:"kind" json:"kind"`
	Provider  string    `msgpack:"provider,omitempty" json:"provider,omitempty"` // a provider key's provider
	Name      string    `msgpack:"name" json:"name"`
	Nonce     []byte    `msgpack:"nonce" json:"-"`
	Sealed    []byte    `msgpack:"sealed" json:"-"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
}

// CredentialPrefix starts every credential id.
const CredentialPrefix = "wtk_"

// Vault seals and opens credentials.
type Vault struct{ aead cipher.AEAD }

// NewVault uses a 32-byte key.
func NewVault(key []byte) (*Vault, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Vault{aead}, nil
}

func additional(c *Credential) []byte {
	b := fmt.Appendf(nil, "%s\x00%s\x00%t\x00%s", c.ID, c.Tenant.Org, c.Tenant.Live, c.Kind)
	if c.Provider != "" { // bound too, for a provider key
		b = fmt.Appendf(b, "\x00%s", c.Provider)
	}
	return b
}

// Seal makes a credential of tenant t holding secret (provider: a provider
// key's provider, else "").
func (v *Vault) Seal(t Tenant, kind, provider, name string, secret []byte, now time.Time) (*Credential, error) {
	id := make([]byte, 16)
	nonce := make([]byte, v.aead.NonceSize())
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	c := &Credential{ID: CredentialPrefix + hex.EncodeToString(id), Tenant: t, Kind: kind, Provider: provider, Name: name, Nonce: nonce, CreatedAt: now}
	c.Sealed = v.aead.Seal(nil, nonce, secret, additional(c))
	return c, nil
}

// ErrUnsealable is a credential that does not open under this key.
var ErrUnsealable = errors.New("credential does not open under this node's key")

// Open returns a credential's secret.
func (v *Vault) Open(c *Credential) ([]byte, error) {
	secret, err := v.aead.Open(nil, c.Nonce, c.Sealed, additional(c))
	if err != nil {
		return nil, ErrUnsealable
	}
	return secret, nil
}

// AddCredential seals secret as a credential of tenant t and stores it.
func AddCredential(st Store, v *Vault, t Tenant, kind, provider, name string, secret []byte, now time.Time) (*Credential, error) {
	c, err := v.Seal(t, kind, provider, name, secret, now)
	if err != nil {
		return nil, err
	}
	return c, st.Update(func(tx Tx) error { return tx.Put(Credentials, []byte(c.ID), c) })
}

// CredentialOf reads tenant t's credential id of kind, nil if it has none
// (another tenant's, or one of another kind, is none).
func CredentialOf(st Store, t Tenant, id, kind string) (*Credential, error) {
	c := new(Credential)
	var ok bool
	if err := st.View(func(tx Tx) (err error) {
		ok, err = tx.Get(Credentials, []byte(id), c)
		return err
	}); err != nil || !ok || c.Tenant != t || c.Kind != kind {
		return nil, err
	}
	return c, nil
}

// OpenVault is the vault under the key in the file at path.
func OpenVault(path string) (*Vault, error) {
	key, err := Secret(path)
	if err != nil {
		return nil, fmt.Errorf("credentials key: %w", err)
	}
	return NewVault(key)
}
