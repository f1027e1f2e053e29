package auth

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/wts-project/wts/persistence"
)

// TestKeys checks keys before and after their records are cached: a cached
// record must not let a wrong secret, or a test key's id under the live
// prefix, through.
func TestKeys(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := NewKeys(st)
	key, err := Create(st, "acme", false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	flip := func(s string, i int) string { // another hex digit at i
		b := []byte(s)
		if b[i] == '0' {
			b[i] = '1'
		} else {
			b[i] = '0'
		}
		return string(b)
	}
	bad := map[string]string{
		"wrong secret":          flip(key, len(key)-1),
		"unknown id":            flip(key, len(TestPrefix)),
		"live prefix":           LivePrefix + key[len(TestPrefix):],
		"short":                 key[:len(key)-1],
		"no prefix":             key[len(TestPrefix):],
		"wrong secret, again":   flip(key, len(TestPrefix)+idLen),
		"empty":                 "",
		"prefix only":           TestPrefix,
		"unknown id and secret": TestPrefix + "0123456789abcdef0123456789abcdef0123456789abcdef",
	}
	for round := range 2 { // the second round reads the cached record
		tn, err := keys.Check(key)
		if err != nil || tn != (persistence.Tenant{Org: "acme"}) {
			t.Fatalf("round %d: the key itself: %v %v", round, tn, err)
		}
		for name, k := range bad {
			if _, err := keys.Check(k); !errors.Is(err, ErrInvalid) {
				t.Errorf("round %d, %s: %v, want ErrInvalid", round, name, err)
			}
		}
	}

	// A key made after its id was looked up and not found is found.
	live, err := Create(st, "acme", true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Check(live); err != nil {
		t.Fatalf("new live key: %v", err)
	}
	if _, err := keys.Check(TestPrefix + live[len(LivePrefix):]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("live key under the test prefix: %v", err)
	}
}
