package persistence

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"time"
)

// Tenant is who owns a resource: an organization, seen through either its
// test keys or its live keys, never both.
type Tenant struct {
	Org  string `msgpack:"org"`
	Live bool   `msgpack:"live"`
}

// Key is an API key as stored: its hash, never the key.
type Key struct {
	ID        string    `msgpack:"id"`
	Tenant    Tenant    `msgpack:"tenant"`
	Hash      []byte    `msgpack:"hash"` // SHA-256 of the whole key
	CreatedAt time.Time `msgpack:"created_at"`
}

// Session is one caller session. Its lease is a record of its own
// (Leases).
type Session struct {
	ID                 string          `msgpack:"id"`
	Tenant             Tenant          `msgpack:"tenant"`
	RequestID          string          `msgpack:"request_id"`
	Status             string          `msgpack:"status"`
	Provider           string          `msgpack:"provider"`
	FundingSource      string          `msgpack:"funding_source"`
	CredentialID       string          `msgpack:"credential_id"`
	MaxCostMicroUSD    *int64          `msgpack:"max_cost_microusd"`
	ErrorCode          string          `msgpack:"error_code"`
	Capability         json.RawMessage `msgpack:"capability"`
	CapabilitySnapshot json.RawMessage `msgpack:"capability_snapshot"`
	RunID              string          `msgpack:"run_id"`
	Metadata           json.RawMessage `msgpack:"metadata"`
	CreatedAt          time.Time       `msgpack:"created_at"`
	UpdatedAt          time.Time       `msgpack:"updated_at"`
	// TrainerMember is the cluster member whose dedicated trainer a
	// provider_a session holds: its run is placed there (actors/slots).
	TrainerMember string `msgpack:"trainer_member,omitempty"`
}

// LoRA is a run's adapter configuration.
type LoRA struct {
	Rank         int    `msgpack:"rank"`
	Seed         uint64 `msgpack:"seed"`
	TrainMLP     bool   `msgpack:"train_mlp"`
	TrainAttn    bool   `msgpack:"train_attn"`
	TrainUnembed bool   `msgpack:"train_unembed"`
}

// Run is a session's run.
type Run struct {
	ID                  string          `msgpack:"id"`
	SessionID           string          `msgpack:"session_id"`
	Tenant              Tenant          `msgpack:"tenant"`
	RequestID           string          `msgpack:"request_id"`
	RequestHash         string          `msgpack:"request_hash,omitempty"` // of the creation's body (SameRequest)
	Status              string          `msgpack:"status"`
	BaseModel           string          `msgpack:"base_model"`
	ModelRevision       string          `msgpack:"model_revision"`
	ResourceProfile     string          `msgpack:"resource_profile"`
	TuningMode          string          `msgpack:"tuning_mode"`
	LoRA                LoRA            `msgpack:"lora"`
	CheckpointID        string          `msgpack:"checkpoint_id"`
	NextSeqID           int64           `msgpack:"next_seq_id"` // authoritative in the run's Head; GetRun fills it in
	SamplerID           string          `msgpack:"sampler_id"`
	LatestWeightVersion int64           `msgpack:"latest_weight_version"`
	ErrorCode           string          `msgpack:"error_code"`
	Metadata            json.RawMessage `msgpack:"metadata"`
	CreatedAt           time.Time       `msgpack:"created_at"`
	UpdatedAt           time.Time       `msgpack:"updated_at"`
	// StateSeq is the seq_id of the last succeeded operation that changed the
	// trainer (forward_backward, optim_step, load_state): the trainer state
	// is the snapshot at SnapshotSeq with every such operation after it
	// replayed in order.
	StateSeq    int64 `msgpack:"state_seq"`
	SnapshotSeq int64 `msgpack:"snapshot_seq"`
	Steps       int64 `msgpack:"steps"`
	// Retired: the run's artifact prefix was removed (retire).
	Retired bool `msgpack:"retired"`
	// WeightsSeq is the StateSeq at which LatestWeightVersion was saved: a
	// run-scoped sample saves a new version only when the trainer moved.
	WeightsSeq int64 `msgpack:"weights_seq"`
}

// SameRecord reports whether r and o hold the same run record, the next
// seq_id aside (the run's Head holds it). A run grain asks on every write
// whether the record changed, in the serial commit loop, where
// reflect.DeepEqual showed in the API benchmark's profiles. Field by
// field, so TestRunSameRecord changes every field by reflection: a field
// added to Run and not compared here fails it.
func (r *Run) SameRecord(o *Run) bool {
	return r.ID == o.ID && r.SessionID == o.SessionID && r.Tenant == o.Tenant && r.RequestID == o.RequestID &&
		r.RequestHash == o.RequestHash &&
		r.Status == o.Status && r.BaseModel == o.BaseModel && r.ModelRevision == o.ModelRevision &&
		r.ResourceProfile == o.ResourceProfile && r.TuningMode == o.TuningMode && r.LoRA == o.LoRA &&
		r.CheckpointID == o.CheckpointID && r.SamplerID == o.SamplerID && r.LatestWeightVersion == o.LatestWeightVersion &&
		r.ErrorCode == o.ErrorCode && bytes.Equal(r.Metadata, o.Metadata) && r.CreatedAt == o.CreatedAt &&
		r.UpdatedAt == o.UpdatedAt && r.StateSeq == o.StateSeq && r.SnapshotSeq == o.SnapshotSeq &&
		r.Steps == o.Steps && r.Retired == o.Retired && r.WeightsSeq == o.WeightsSeq
}

// Head is the part of a run's state that changes with every operation,
// kept apart from the run record so that accepting an operation rewrites a
// few bytes in a small bucket, not the whole run: the activation fence of
// the run's grain (each activation bumps it, and a write from an older one
// is refused) and the run's next seq_id.
type Head struct {
	Epoch     uint64 `msgpack:"epoch"`
	NextSeqID int64  `msgpack:"next_seq_id"`
}

// GetSession reads the session id.
func GetSession(tx Tx, id string, s *Session) (bool, error) { return tx.Get(Sessions, []byte(id), s) }

// GetRun reads the run id, its next seq_id included.
func GetRun(tx Tx, id string, r *Run) (bool, error) {
	if ok, err := tx.Get(Runs, []byte(id), r); !ok || err != nil {
		return ok, err
	}
	var h Head
	if _, err := tx.Get(Heads, []byte(id), &h); err != nil {
		return true, err
	}
	r.NextSeqID = h.NextSeqID
	return true, nil
}

// CreateRun writes a new run, its head and its listing entry.
func CreateRun(tx Tx, r *Run) error {
	if err := tx.Put(Runs, []byte(r.ID), r); err != nil {
		return err
	}
	if err := List(tx, r.Tenant, "run", r.CreatedAt, r.ID); err != nil {
		return err
	}
	return tx.Put(Heads, []byte(r.ID), &Head{NextSeqID: r.NextSeqID})
}

// Operation is one submitted primitive of a run.
type Operation struct {
	ID                string          `msgpack:"id"`
	SessionID         string          `msgpack:"session_id"`
	RunID             string          `msgpack:"run_id"`
	SeqID             int64           `msgpack:"seq_id"`
	Kind              string          `msgpack:"kind"`
	Status            string          `msgpack:"status"`
	Result            json.RawMessage `msgpack:"result"`
	ErrorCode         *string         `msgpack:"error_code"`
	ErrorMessage      *string         `msgpack:"error_message"`
	Progress          json.RawMessage `msgpack:"progress"`
	ProgressUpdatedAt *time.Time      `msgpack:"progress_updated_at"`
	CreatedAt         time.Time       `msgpack:"created_at"`
	UpdatedAt         time.Time       `msgpack:"updated_at"`

	IdempotencyKey string          `msgpack:"idempotency_key"`
	RequestHash    string          `msgpack:"request_hash"`
	Payload        json.RawMessage `msgpack:"payload"`
	// Usage is what the operation used, written with its outcome: inside
	// the operation record, so that recording an outcome rewrites one
	// record, not one per meter.
	Usage []Usage `msgpack:"usage,omitempty"`
	// Attempts counts the starts the node died under (a crash while it was
	// executing): the operation runs again after each, up to a limit.
	Attempts int64 `msgpack:"attempts,omitempty"`
	// HoldMicroUSD is the estimate its session's budget holds for it while
	// it is queued or executing (providers/ledger); Charged: its ending
	// was charged to the budget, in the write that ended it.
	HoldMicroUSD int64 `msgpack:"hold,omitempty"`
	Charged      bool  `msgpack:"charged,omitempty"`
}

// Metric is the step record of one forward_backward or optim_step.
type Metric struct {
	SeqID      int64              `msgpack:"seq_id"`
	Kind       string             `msgpack:"kind"`
	Step       int64              `msgpack:"step"`
	Values     map[string]float64 `msgpack:"values"`
	DurationMS float64            `msgpack:"duration_ms"`
	CreatedAt  time.Time          `msgpack:"created_at"`
}

// Usage is one usage component: what one operation used of one meter, and
// its cost at the session's price list. Stored inside its operation, it
// leaves out the ids and provider, which are the operation's and its
// session's; readers fill them in.
type Usage struct {
	SessionID   string `msgpack:"session_id,omitempty"`
	RunID       string `msgpack:"run_id,omitempty"`
	OperationID string `msgpack:"operation_id,omitempty"`
	Provider    string `msgpack:"provider,omitempty"`
	Meter       string `msgpack:"meter"`
	Quantity    int64  `msgpack:"quantity"`
	Unit        string `msgpack:"unit"`
	// UnitPrice is the meter's price, in micro-USD per million units (the
	// session's billing snapshot's).
	UnitPrice        int64      `msgpack:"unit_price"`
	CostMicroUSD     int64      `msgpack:"cost_microusd"`
	SettlementStatus string     `msgpack:"settlement_status"`
	ObservedAt       time.Time  `msgpack:"observed_at"`
	SettledAt        *time.Time `msgpack:"settled_at"`
}

// SeqKey is the key of a run's record with sequence number seq: the run id
// then seq big-endian, so keys sort in seq order.
func SeqKey(runID string, seq int64) []byte {
	k := make([]byte, len(runID)+8)
	copy(k, runID)
	binary.BigEndian.PutUint64(k[len(runID):], uint64(seq))
	return k
}

// IdemKey is the key of a run's idempotency entry.
func IdemKey(runID, key string) []byte {
	return append(append([]byte(runID), 0), key...)
}

// Output is what a checkpoint and an artifact share: who owns it, the run
// operation that made it, and whether it is still there.
type Output struct {
	ID        string    `msgpack:"id"`
	Tenant    Tenant    `msgpack:"tenant"`
	SessionID string    `msgpack:"session_id"`
	RunID     string    `msgpack:"run_id"`
	SeqID     int64     `msgpack:"seq_id"`
	Status    string    `msgpack:"status"` // available, or retired with its run
	CreatedAt time.Time `msgpack:"created_at"`
}

// Checkpoint is a trainer state saved by save_state: the adapter (as a PEFT
// adapter) and AdamW's moments, in its folder on the artifact volume.
// Accumulated gradients are not part of it.
type Checkpoint struct {
	Output        `msgpack:",inline"`
	Name          string `msgpack:"name"`
	BaseModel     string `msgpack:"base_model"`
	ModelRevision string `msgpack:"model_revision"`
	LoRA          LoRA   `msgpack:"lora"`
	Step          int64  `msgpack:"step"` // optimizer steps taken
	SizeBytes     int64  `msgpack:"size_bytes"`
}

// Artifact is an exported adapter: a folder of files on the artifact
// volume, downloadable through signed URLs.
type Artifact struct {
	Output       `msgpack:",inline"`
	CheckpointID string         `msgpack:"checkpoint_id"`
	Kind         string         `msgpack:"kind"`
	Checksum     string         `msgpack:"checksum"`
	SizeBytes    int64          `msgpack:"size_bytes"`
	ExportMode   string         `msgpack:"export_mode"`
	Files        []ArtifactFile `msgpack:"files"`
}

// ArtifactFile is one file of an artifact. Its JSON shape is a merged
// folder's manifest file's, and the API shows the same.
type ArtifactFile struct {
	Path      string `msgpack:"path" json:"path"`
	SizeBytes int64  `msgpack:"size_bytes" json:"size_bytes"`
	SHA256    string `msgpack:"sha256" json:"sha256"`
}

// Export is the publication of an artifact to a model hub repository.
type Export struct {
	ID               string    `msgpack:"id"`
	Tenant           Tenant    `msgpack:"tenant"`
	RequestID        string    `msgpack:"request_id"`
	RunID            string    `msgpack:"run_id"`
	ArtifactID       string    `msgpack:"artifact_id"`
	Status           string    `msgpack:"status"`
	ResultArtifactID string    `msgpack:"result_artifact_id"`
	Repo             string    `msgpack:"repo"`
	Revision         string    `msgpack:"revision"`
	Private          bool      `msgpack:"private"`
	CredentialID     string    `msgpack:"credential_id"`
	CommitOID        string    `msgpack:"commit_oid"`
	ErrorCode        string    `msgpack:"error_code"`
	ErrorMessage     string    `msgpack:"error_message"`
	CreatedAt        time.Time `msgpack:"created_at"`
	UpdatedAt        time.Time `msgpack:"updated_at"`
	// Claim is the exporter uploading it, until ClaimedUntil (renewed while
	// it works): in a cluster, one node's exporter at a time.
	Claim        string    `msgpack:"claim,omitempty"`
	ClaimedUntil time.Time `msgpack:"claimed_until,omitempty"`
}

// Sampler is a run's sampler: it serves sample and logprobs operations, in
// its own seq_id order, on the run's saved weights (a weight version).
type Sampler struct {
	ID                  string    `msgpack:"id"`
	Tenant              Tenant    `msgpack:"tenant"`
	SessionID           string    `msgpack:"session_id"`
	RunID               string    `msgpack:"run_id"`
	BaseModel           string    `msgpack:"base_model"`
	Status              string    `msgpack:"status"`
	SyncedWeightVersion int64     `msgpack:"synced_weight_version"`
	NextSeqID           int64     `msgpack:"next_seq_id"` // authoritative in the sampler's Head
	ErrorCode           string    `msgpack:"error_code"`
	LastActivityAt      time.Time `msgpack:"last_activity_at"`
	CreatedAt           time.Time `msgpack:"created_at"`
	UpdatedAt           time.Time `msgpack:"updated_at"`
}
