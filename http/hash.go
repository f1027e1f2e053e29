package httpapi

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/wts-project/wts/http/jcs"
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// bodyHash is the SHA-256 of a creation body's RFC 8785 form: its
// request_id may be reused only with the same body, however the JSON is
// spelled. "" (no check) for a body that is not canonicalizable.
func bodyHash(body []byte) string {
	c, err := jcs.Canonical(body, "")
	if err != nil {
		return ""
	}
	return sha256Hex(c)
}
