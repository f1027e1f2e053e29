package protocol

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
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

// SamplerID is the id of run runID's sampler, derived from the run's (a run
// has one sampler) so that the trainer can name it before it exists.
func SamplerID(runID string) string { return SamplerPrefix + runID[len(RunPrefix):] }

// ExportPrefix starts every export id.
const ExportPrefix = "wte_"
