package hub

import (
	"net/url"
	"testing"
)

// TestTokenStaysHome: the token goes to the hub's own origin only, not to
// a host that merely starts with the same text.
func TestTokenStaysHome(t *testing.T) {
	for u, want := range map[string]bool{
		"https://hub.example.com/api/x":               true,
		"https://hub.example.com.evil.net/upload":     false,
		"http://hub.example.com/api/x":                false,
		"https://hub.example.com:8443/api/x":          false,
		"https://storage.example.net/lfs?sig=abcdefg": false,
	} {
		parsed, _ := url.Parse(u)
		if got := sameOrigin(parsed, "https://hub.example.com"); got != want {
			t.Errorf("%s: token sent %t, want %t", u, got, want)
		}
	}
}
