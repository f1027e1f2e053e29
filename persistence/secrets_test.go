package persistence

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSecret makes a key once, owner-only, and reads the same one back.
func TestSecret(t *testing.T) {
	path := SecretPath(t.TempDir(), "k")
	a, err := Secret(path)
	if err != nil || len(a) != 32 {
		t.Fatalf("%d bytes, %v", len(a), err)
	}
	b, err := Secret(path)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatal("a second read made another key")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	os.WriteFile(filepath.Join(filepath.Dir(path), "short.key"), []byte("x"), 0o600)
	if _, err := Secret(filepath.Join(filepath.Dir(path), "short.key")); err == nil {
		t.Error("a short key file was accepted")
	}
}

// TestVault seals a hub token and a provider key, each of which opens
// only in its own record.
func TestVault(t *testing.T) {
	key, _ := Secret(SecretPath(t.TempDir(), "c"))
	v, err := NewVault(key)
	if err != nil {
		t.Fatal(err)
	}
	acme := Tenant{Org: "acme"}
	for _, provider := range []string{"", "provider_b"} {
		c, err := v.Seal(acme, "hub_token", provider, "hub", []byte("hf_secret"), time.Now())
		if err != nil || bytes.Contains(c.Sealed, []byte("hf_secret")) {
			t.Fatalf("sealed %q, %v", c.Sealed, err)
		}
		if got, err := v.Open(c); err != nil || string(got) != "hf_secret" {
			t.Fatalf("open: %q %v", got, err)
		}
		for name, edit := range map[string]func(*Credential){
			"another owner":    func(c *Credential) { c.Tenant = Tenant{Org: "other"} },
			"live keys":        func(c *Credential) { c.Tenant.Live = true },
			"another id":       func(c *Credential) { c.ID = CredentialPrefix + "0" },
			"a flipped byte":   func(c *Credential) { c.Sealed[0] ^= 1 },
			"another kind":     func(c *Credential) { c.Kind = "other" },
			"another provider": func(c *Credential) { c.Provider = "provider_a" },
		} {
			d := *c
			d.Sealed = append([]byte(nil), c.Sealed...)
			edit(&d)
			if _, err := v.Open(&d); !errors.Is(err, ErrUnsealable) {
				t.Errorf("%q %s: %v", provider, name, err)
			}
		}
		other, _ := NewVault(bytes.Repeat([]byte{7}, 32))
		if _, err := other.Open(c); !errors.Is(err, ErrUnsealable) {
			t.Error("another node's key opened it")
		}
	}
}

// TestSigner checks links: the signed path and expiry only, in time.
func TestSigner(t *testing.T) {
	s := NewSigner(bytes.Repeat([]byte{1}, 32))
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	sig := s.Sign("/v1/files/a/peft/x", exp)
	ok := func(path, expires, sig string, at time.Time) error { return s.Verify(path, expires, sig, at) }
	if err := ok("/v1/files/a/peft/x", "1800003600", sig, now); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"other path":   ok("/v1/files/a/peft/y", "1800003600", sig, now),
		"other expiry": ok("/v1/files/a/peft/x", "1800007200", sig, now),
		"bad hex":      ok("/v1/files/a/peft/x", "1800003600", "zz", now),
		"no expiry":    ok("/v1/files/a/peft/x", "", sig, now),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := ok("/v1/files/a/peft/x", "1800003600", sig, exp); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v", err)
	}
	if NewSigner(bytes.Repeat([]byte{2}, 32)).Verify("/v1/files/a/peft/x", "1800003600", sig, now) == nil {
		t.Error("another key verified the link")
	}
}
