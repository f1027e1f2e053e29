package actors

import (
	"crypto/rand"
	"encoding/hex"
)

// Identifier prefixes; each is followed by 32 hex digits.
const (
	SessionPrefix    = "wts_"
	RunPrefix        = "wtr_"
	OperationPrefix  = "wto_"
	SamplerPrefix    = "wtsm_"
	CheckpointPrefix = "wtc_"
)

// NewID is a fresh random identifier with prefix.
func NewID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
