package protocol

import (
	"encoding/json"
	"time"

	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/persistence"
)

// Submission is one operation submitted to a run or a sampler,
// schema-checked already; its grain admits it (oplog.Admit).
type Submission struct {
	Tenant         persistence.Tenant
	Target         string // the run or sampler id
	SeqID          int64
	IdempotencyKey string
	RequestHash    string
	Kind           string
	Payload        json.RawMessage
}

// Accepted is a grain's answer to a submission: the operation handle, and
// whether this request created it (false: an idempotent repeat).
type Accepted struct {
	Op      persistence.Operation
	Created bool
}

// Control is a finish, cancel or retire request on a run.
type Control struct {
	Tenant    persistence.Tenant
	RequestID string
}

// RunEnd is the session's order to end its run (close, lease expiry).
type RunEnd struct {
	Status string
	Code   string
}

// NewSession is a session-creation request, checked for schema already.
type NewSession struct {
	Tenant          persistence.Tenant
	RequestID       string
	Provider        string
	Preferences     []string
	Funding         string
	CredentialID    string
	MaxCostMicroUSD *int64
	IdleTTLSeconds  int64
	Metadata        json.RawMessage
	BodyHash        string // of the request's body: a request_id reused with another is refused
}

// Session is a session as the API shows it: its record and its lease.
type Session struct {
	persistence.Session
	LeaseEpoch     int64
	LeaseExpiresAt time.Time
	IdleTTLSeconds int64
}

// SessionView is ss with its lease l, as the API shows it.
func SessionView(ss *persistence.Session, l *lease.Lease) *Session {
	return &Session{Session: *ss, LeaseEpoch: l.Epoch, LeaseExpiresAt: l.ExpiresAt, IdleTTLSeconds: l.TTLSeconds}
}

// NewRun is a run-creation request, checked for schema already.
type NewRun struct {
	Tenant        persistence.Tenant
	SessionID     string
	RequestID     string
	BaseModel     string
	ModelRevision string
	TuningMode    string
	LoRA          *persistence.LoRA
	CheckpointID  string
	Metadata      json.RawMessage
	BodyHash      string // of the request's body: a request_id reused with another is refused
}

// RunReply is a session grain's answer to a run creation.
type RunReply struct {
	Run     persistence.Run
	Created bool
}

// RetireReply is a run grain's answer to a retire.
type RetireReply struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Retired bool   `json:"retired"`
}

// WeightsUpdate tells a sampler of its run's new latest weight version.
type WeightsUpdate struct{ Version int64 }

// RunSample is a run-scoped sample handed over by the run to its sampler:
// sample at the given weight version (at least) and report to the run.
type RunSample struct {
	RunEpoch uint64
	SeqID    int64
	Payload  json.RawMessage
	Version  int64
}

// NewExport is an export request, schema-checked already.
type NewExport struct {
	Tenant       persistence.Tenant
	RequestID    string
	RunID        string
	ArtifactID   string
	Repo         string
	Revision     string
	Private      bool
	CredentialID string
	BodyHash     string // of the request's body: a request_id reused with another is refused
}

// ExportReply is an export as the API shows it: with the published artifact
// once the export has succeeded, without it before.
type ExportReply struct {
	Export   *persistence.Export
	Artifact *persistence.Artifact
	Mode     string
}

// What exports and downloads name.
const (
	CredentialHub = "hub_token" // the kind of credential a hub export uses
	// CredentialProvider is the kind of a customer's key to a provider,
	// which funds its byok sessions.
	CredentialProvider = "provider_key"
	DestinationHub     = "model_hub"
	ExportModeLoRA     = "lora"
	FormatPEFT         = "peft"   // an artifact's own files
	FormatMerged       = "merged" // the base model with the adapter folded in, an HF model folder
)
