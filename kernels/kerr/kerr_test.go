package kerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestCodeFollowsWrapping(t *testing.T) {
	err := fmt.Errorf("datum 3: %w", fmt.Errorf("%w: token 99", ErrTokenRange))
	if got := Code(err); got != "token_out_of_range" {
		t.Fatalf("code %q", got)
	}
	if got := Code(errors.New("disk on fire")); got != "" {
		t.Fatalf("an internal error got code %q", got)
	}
	seen := map[string]bool{}
	for _, c := range codes {
		if c.code == "" || seen[c.code] {
			t.Fatalf("code %q empty or repeated", c.code)
		}
		seen[c.code] = true
	}
}
