package actors

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/wts-project/wts/actors/payload"
)

// Identifier prefixes; each is followed by 32 hex digits.
const (
	SessionPrefix    = "wts_"
	RunPrefix        = "wtr_"
	OperationPrefix  = "wto_"
	SamplerPrefix    = "wtsm_"
	CheckpointPrefix = payload.CheckpointPrefix
)

// NewID is a fresh identifier with prefix: 48 bits of Unix milliseconds then
// 80 random bits. Leading with the time makes ids made close together sort
// together, so the store's id-keyed indexes grow at their end (one leaf page
// touched per commit) instead of rewriting a random page for every insert;
// the random part keeps ids unguessable and unique across nodes.
func NewID(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	rand.Read(b[6:])
	return prefix + hex.EncodeToString(b[:])
}

// checkpointID is the id of the checkpoint that the save_state operation
// opID makes, and artifactID the id of the artifact an export_lora makes:
// derived from the operation's id, so that an operation that runs again
// (after an interrupted attempt left its files) rewrites the same folder.
func checkpointID(opID string) string {
	return CheckpointPrefix + opID[len(OperationPrefix):]
}

// artifactID lays the operation id's 32 hex digits out as a UUID (version 8,
// the custom layout of RFC 9562).
func artifactID(opID string) string {
	h := []byte(opID[len(OperationPrefix):])
	h[12] = '8'
	h[16] = "89ab"[strings.IndexByte("0123456789abcdef", h[16])%4]
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}
