package httpapi

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/payload/scan"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/persistence"
)

// Request bodies, decoded strictly (no unknown fields, exact types) and then
// checked against the spec's ranges, lengths, patterns and enums. Pointer
// fields tell "absent" from a zero value.

type invalid = payload.Invalid

var (
	hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func required[T any](v *T, field string) error {
	if v == nil {
		return &invalid{Field: field, Reason: "is required"}
	}
	return nil
}

func length(s *string, field string, lo, hi int) error {
	if s != nil && (len(*s) < lo || len(*s) > hi) {
		return &invalid{Field: field, Reason: fmt.Sprintf("must be %d to %d characters long", lo, hi)}
	}
	return nil
}

func oneOf(s *string, field string, allowed ...string) error {
	if s == nil {
		return nil
	}
	for _, a := range allowed {
		if *s == a {
			return nil
		}
	}
	return &invalid{Field: field, Reason: fmt.Sprintf("must be one of %q", allowed)}
}

func rangeInt(v *int64, field string, lo, hi int64) error {
	if v != nil && (*v < lo || *v > hi) {
		return &invalid{Field: field, Reason: fmt.Sprintf("must be between %d and %d", lo, hi)}
	}
	return nil
}

func object(raw json.RawMessage, field string) error {
	if raw != nil && (len(raw) == 0 || raw[0] != '{') {
		return &invalid{Field: field, Reason: "must be an object"}
	}
	return nil
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// sessionBody is POST /v1/training/sessions.
type sessionBody struct {
	RequestID           *string         `json:"request_id"`
	Provider            *string         `json:"provider"`
	ProviderPreferences []string        `json:"provider_preferences"`
	FundingPreference   *string         `json:"funding_preference"`
	CredentialID        *string         `json:"credential_id"`
	MaxCostMicroUSD     *int64          `json:"max_cost_microusd"`
	IdleTTLSeconds      *int64          `json:"idle_ttl_s"`
	Metadata            json.RawMessage `json:"metadata"`
}

func (b *sessionBody) check() error {
	err := first(required(b.RequestID, "request_id"), length(b.RequestID, "request_id", 1, 200),
		oneOf(b.Provider, "provider", "auto", "provider_a", "provider_b"),
		oneOf(b.FundingPreference, "funding_preference", "auto", "platform", "byok"),
		length(b.CredentialID, "credential_id", 1, 200),
		rangeInt(b.MaxCostMicroUSD, "max_cost_microusd", 1, 1<<62),
		rangeInt(b.IdleTTLSeconds, "idle_ttl_s", int64(lease.MinTTL/time.Second), int64(lease.MaxTTL/time.Second)),
		object(b.Metadata, "metadata"))
	if err != nil {
		return err
	}
	for i := range b.ProviderPreferences {
		if err := oneOf(&b.ProviderPreferences[i], fmt.Sprintf("provider_preferences[%d]", i), "provider_a", "provider_b"); err != nil {
			return err
		}
	}
	return nil
}

func (b *sessionBody) request(t persistence.Tenant) protocol.NewSession {
	return protocol.NewSession{
		Tenant: t, RequestID: *b.RequestID, Provider: or(b.Provider, "auto"), Preferences: b.ProviderPreferences,
		Funding: or(b.FundingPreference, "auto"), CredentialID: or(b.CredentialID, ""), MaxCostMicroUSD: b.MaxCostMicroUSD,
		IdleTTLSeconds: or(b.IdleTTLSeconds, 0), Metadata: b.Metadata,
	}
}

// requestBody is every body that carries only a request_id (heartbeat,
// close, finish, cancel, retire).
type requestBody struct {
	RequestID *string `json:"request_id"`
}

func (b *requestBody) check() error {
	return first(required(b.RequestID, "request_id"), length(b.RequestID, "request_id", 1, 200))
}

// loraBody is a run's lora object; absent fields take Tinker's defaults.
type loraBody struct {
	Rank         *int64 `json:"rank"`
	Seed         *int64 `json:"seed"`
	TrainMLP     *bool  `json:"train_mlp"`
	TrainAttn    *bool  `json:"train_attn"`
	TrainUnembed *bool  `json:"train_unembed"`
}

// DefaultRank is the LoRA rank of a run that names none.
const DefaultRank = 32

// runBody is POST /v1/training/sessions/{id}/runs.
type runBody struct {
	RequestID     *string         `json:"request_id"`
	BaseModel     *string         `json:"base_model"`
	ModelRevision *string         `json:"model_revision"`
	TuningMode    *string         `json:"tuning_mode"`
	LoRA          *loraBody       `json:"lora"`
	CheckpointID  *string         `json:"checkpoint_id"`
	Metadata      json.RawMessage `json:"metadata"`
}

func (b *runBody) check() error {
	err := first(required(b.RequestID, "request_id"), length(b.RequestID, "request_id", 1, 200),
		required(b.BaseModel, "base_model"), length(b.BaseModel, "base_model", 1, 256),
		required(b.ModelRevision, "model_revision"), length(b.ModelRevision, "model_revision", 7, 128),
		oneOf(b.TuningMode, "tuning_mode", "lora", "full"),
		object(b.Metadata, "metadata"))
	if err != nil {
		return err
	}
	if b.CheckpointID != nil && !payload.IsID(protocol.CheckpointPrefix, *b.CheckpointID) {
		return &invalid{Field: "checkpoint_id", Reason: "must match ^wtc_[0-9a-f]{32}$"}
	}
	if or(b.TuningMode, "lora") == "full" {
		if b.LoRA != nil {
			return &invalid{Field: "lora", Reason: "must be absent when tuning_mode is full"}
		}
		return nil
	}
	if l := b.LoRA; l != nil {
		if err := first(rangeInt(l.Rank, "lora.rank", 1, 1<<20), rangeInt(l.Seed, "lora.seed", 0, 1<<62)); err != nil {
			return err
		}
		if !or(l.TrainMLP, true) && !or(l.TrainAttn, true) && !or(l.TrainUnembed, true) {
			return &invalid{Field: "lora", Reason: "at least one of train_mlp, train_attn, train_unembed must be true"}
		}
	}
	return nil
}

func (b *runBody) request(t persistence.Tenant, sessionID string) protocol.NewRun {
	r := protocol.NewRun{
		Tenant: t, SessionID: sessionID, RequestID: *b.RequestID, BaseModel: *b.BaseModel, ModelRevision: *b.ModelRevision,
		TuningMode: or(b.TuningMode, "lora"), CheckpointID: or(b.CheckpointID, ""), Metadata: b.Metadata,
	}
	if r.TuningMode == "lora" {
		l := or(b.LoRA, loraBody{})
		r.LoRA = &persistence.LoRA{Rank: int(or(l.Rank, DefaultRank)), Seed: uint64(or(l.Seed, 0)),
			TrainMLP: or(l.TrainMLP, true), TrainAttn: or(l.TrainAttn, true), TrainUnembed: or(l.TrainUnembed, true)}
	}
	return r
}

// opBody is POST /v1/training/runs/{id}/operations and
// /v1/training/samplers/{id}/operations.
type opBody struct {
	SeqID          *int64          `json:"seq_id"`
	IdempotencyKey *string         `json:"idempotency_key"`
	RequestHash    *string         `json:"request_hash"`
	Kind           *string         `json:"kind"`
	Payload        json.RawMessage `json:"payload"`
}

// decodePlain is opBody's plain decoder: every submission's body came
// through go-json's stream decoder, which showed in bench/apibench's CPU
// profiles. FuzzOpBodyPlain holds it to Strict.
func (b *opBody) decodePlain(body []byte) bool {
	s := scan.Scanner{Buf: body}
	str := func(v **string) bool {
		x, ok := s.Str()
		if *v != nil || !ok {
			return false
		}
		val := string(x)
		*v = &val
		return true
	}
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "seq_id":
			n, ok := s.Uint()
			if b.SeqID != nil || !ok {
				return false
			}
			b.SeqID = &n
			return true
		case "idempotency_key":
			return str(&b.IdempotencyKey)
		case "request_hash":
			return str(&b.RequestHash)
		case "kind":
			return str(&b.Kind)
		case "payload":
			raw, ok := s.Raw()
			if b.Payload != nil || !ok {
				return false
			}
			b.Payload = raw
			return true
		}
		return false
	})
	if !ok || !s.End() {
		*b = opBody{}
		return false
	}
	return true
}

// The operation kinds each endpoint takes (actors' kind table).
var (
	runKinds     = executor.RunKinds()
	samplerKinds = executor.SamplerKinds()
)

func (b *opBody) check(kinds []string) error {
	err := first(required(b.SeqID, "seq_id"), rangeInt(b.SeqID, "seq_id", 1, 2147483647),
		required(b.IdempotencyKey, "idempotency_key"), length(b.IdempotencyKey, "idempotency_key", 1, 200),
		required(b.RequestHash, "request_hash"),
		required(b.Kind, "kind"),
		oneOf(b.Kind, "kind", kinds...))
	if err != nil {
		return err
	}
	if !hashPattern.MatchString(*b.RequestHash) {
		return &invalid{Field: "request_hash", Reason: "must be 64 lowercase hex digits"}
	}
	if b.Payload == nil {
		return &invalid{Field: "payload", Reason: "is required"}
	}
	return object(b.Payload, "payload")
}

// exportBody is POST /v1/training/runs/{run_id}/exports.
type exportBody struct {
	RequestID    *string `json:"request_id"`
	ArtifactID   *string `json:"artifact_id"`
	Repo         *string `json:"repo"`
	Destination  *string `json:"destination"`
	Private      *bool   `json:"private"`
	CredentialID *string `json:"credential_id"`
	Revision     *string `json:"revision"`
	Mode         *string `json:"mode"`
}

var (
	repoPattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	revisionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
)

func (b *exportBody) check() error {
	if err := first(required(b.RequestID, "request_id"), required(b.ArtifactID, "artifact_id"), required(b.Repo, "repo"),
		required(b.CredentialID, "credential_id"), length(b.RequestID, "request_id", 1, 200),
		length(b.CredentialID, "credential_id", 1, 200), length(b.Repo, "repo", 1, 200), length(b.Revision, "revision", 1, 80),
		oneOf(b.Destination, "destination", protocol.DestinationHub), oneOf(b.Mode, "mode", protocol.ExportModeLoRA)); err != nil {
		return err
	}
	if !payload.IsUUID(*b.ArtifactID) {
		return &invalid{Field: "artifact_id", Reason: "must be a lowercase UUID"}
	}
	if !repoPattern.MatchString(*b.Repo) {
		return &invalid{Field: "repo", Reason: "must match " + repoPattern.String()}
	}
	if b.Revision != nil && (!revisionPattern.MatchString(*b.Revision) || strings.Contains(*b.Revision, "..")) {
		return &invalid{Field: "revision", Reason: "must be a branch name: letters, digits, '.', '_', '-' and '/'"}
	}
	return nil
}

func (b *exportBody) request(t persistence.Tenant, runID string) protocol.NewExport {
	return protocol.NewExport{Tenant: t, RequestID: *b.RequestID, RunID: runID, ArtifactID: *b.ArtifactID, Repo: *b.Repo,
		Revision: or(b.Revision, "main"), Private: or(b.Private, true), CredentialID: *b.CredentialID}
}

// carriesToken reports a body field that looks like a secret: the service
// takes credential references only, and says so rather than "unknown field".
func carriesToken(body []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	for k := range fields {
		if l := strings.ToLower(k); strings.Contains(l, "token") || strings.Contains(l, "authorization") || strings.Contains(l, "password") {
			return k
		}
	}
	return ""
}
