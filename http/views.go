package httpapi

import (
	"encoding/json"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// The API's response shapes (docs/api.md, the OpenAPI document). Stored
// records (persistence) hold what the store keeps and have no JSON shape of
// their own: each reply is built here from the record, so that a field added
// to a record reaches no caller until it is shown here, and a field the
// service keeps for itself (tenants, request ids, payloads, hashes,
// credentials, replay marks) never does.

type sessionView struct {
	ID                 string          `json:"id"`
	Status             string          `json:"status"`
	Provider           string          `json:"provider"`
	FundingSource      string          `json:"funding_source"`
	MaxCostMicroUSD    *int64          `json:"max_cost_microusd"`
	ErrorCode          string          `json:"error_code,omitempty"`
	Capability         json.RawMessage `json:"capability"`
	CapabilitySnapshot json.RawMessage `json:"capability_snapshot"`
	RunID              string          `json:"run_id,omitempty"`
	Metadata           json.RawMessage `json:"metadata,omitempty"`
	CreatedAt          time.Time       `json:"created_at"`
	UpdatedAt          time.Time       `json:"updated_at"`
	LeaseEpoch         int64           `json:"lease_epoch"`
	LeaseExpiresAt     time.Time       `json:"lease_expires_at"`
	IdleTTLSeconds     int64           `json:"idle_ttl_s"`
}

func sessionOf(s *protocol.Session) *sessionView {
	return &sessionView{ID: s.ID, Status: s.Status, Provider: s.Provider, FundingSource: s.FundingSource, MaxCostMicroUSD: s.MaxCostMicroUSD,
		ErrorCode: s.ErrorCode, Capability: s.Capability, CapabilitySnapshot: s.CapabilitySnapshot, RunID: s.RunID, Metadata: s.Metadata,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, LeaseEpoch: s.LeaseEpoch, LeaseExpiresAt: s.LeaseExpiresAt, IdleTTLSeconds: s.IdleTTLSeconds}
}

type loraView struct {
	Rank         int    `json:"rank"`
	Seed         uint64 `json:"seed"`
	TrainMLP     bool   `json:"train_mlp"`
	TrainAttn    bool   `json:"train_attn"`
	TrainUnembed bool   `json:"train_unembed"`
}

func loraOf(l persistence.LoRA) loraView {
	return loraView{Rank: l.Rank, Seed: l.Seed, TrainMLP: l.TrainMLP, TrainAttn: l.TrainAttn, TrainUnembed: l.TrainUnembed}
}

type runView struct {
	ID                  string          `json:"id"`
	SessionID           string          `json:"session_id"`
	Status              string          `json:"status"`
	BaseModel           string          `json:"base_model"`
	ModelRevision       string          `json:"model_revision"`
	ResourceProfile     string          `json:"resource_profile"`
	TuningMode          string          `json:"tuning_mode"`
	LoRA                loraView        `json:"lora"`
	CheckpointID        string          `json:"checkpoint_id,omitempty"`
	NextSeqID           int64           `json:"next_seq_id"`
	SamplerID           string          `json:"sampler_id,omitempty"`
	LatestWeightVersion int64           `json:"latest_weight_version"`
	ErrorCode           string          `json:"error_code,omitempty"`
	Retired             bool            `json:"retired"` // its checkpoints' and artifacts' files are gone
	Metadata            json.RawMessage `json:"metadata,omitempty"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
}

func runOf(r *persistence.Run) *runView {
	return &runView{ID: r.ID, SessionID: r.SessionID, Status: r.Status, BaseModel: r.BaseModel, ModelRevision: r.ModelRevision,
		ResourceProfile: r.ResourceProfile, TuningMode: r.TuningMode, LoRA: loraOf(r.LoRA), CheckpointID: r.CheckpointID,
		NextSeqID: r.NextSeqID, SamplerID: r.SamplerID, LatestWeightVersion: r.LatestWeightVersion, ErrorCode: r.ErrorCode,
		Retired: r.Retired, Metadata: r.Metadata, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// operationView is an operation handle: its payload, idempotency key,
// request hash, usage and attempts stay stored.
type operationView struct {
	ID                string          `json:"id"`
	SessionID         string          `json:"session_id"`
	RunID             string          `json:"run_id"`
	SeqID             int64           `json:"seq_id"`
	Kind              string          `json:"kind"`
	Status            string          `json:"status"`
	Result            json.RawMessage `json:"result"`
	ErrorCode         *string         `json:"error_code"`
	ErrorMessage      *string         `json:"error_message"`
	Progress          json.RawMessage `json:"progress"`
	ProgressUpdatedAt *time.Time      `json:"progress_updated_at"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
}

func operationOf(op *persistence.Operation) *operationView {
	return &operationView{ID: op.ID, SessionID: op.SessionID, RunID: op.RunID, SeqID: op.SeqID, Kind: op.Kind, Status: op.Status,
		Result: op.Result, ErrorCode: op.ErrorCode, ErrorMessage: op.ErrorMessage, Progress: op.Progress,
		ProgressUpdatedAt: op.ProgressUpdatedAt, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt}
}

type samplerView struct {
	ID                  string    `json:"id"`
	SessionID           string    `json:"session_id"`
	RunID               string    `json:"run_id"`
	Status              string    `json:"status"`
	SyncedWeightVersion int64     `json:"synced_weight_version"`
	NextSeqID           int64     `json:"next_seq_id"`
	ErrorCode           string    `json:"error_code,omitempty"`
	LastActivityAt      time.Time `json:"last_activity_at"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

func samplerOf(s *persistence.Sampler) *samplerView {
	return &samplerView{ID: s.ID, SessionID: s.SessionID, RunID: s.RunID, Status: s.Status, SyncedWeightVersion: s.SyncedWeightVersion,
		NextSeqID: s.NextSeqID, ErrorCode: s.ErrorCode, LastActivityAt: s.LastActivityAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// outputView is what a checkpoint and an artifact show of their provenance.
type outputView struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id"`
	SeqID     int64     `json:"seq_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

func outputOf(o *persistence.Output) outputView {
	return outputView{ID: o.ID, SessionID: o.SessionID, RunID: o.RunID, SeqID: o.SeqID, Status: o.Status, CreatedAt: o.CreatedAt}
}

type checkpointView struct {
	outputView
	Name          string   `json:"name,omitempty"`
	BaseModel     string   `json:"base_model"`
	ModelRevision string   `json:"model_revision"`
	LoRA          loraView `json:"lora"`
	Step          int64    `json:"step"`
	SizeBytes     int64    `json:"size_bytes"`
}

func checkpointOf(c *persistence.Checkpoint) *checkpointView {
	return &checkpointView{outputView: outputOf(&c.Output), Name: c.Name, BaseModel: c.BaseModel, ModelRevision: c.ModelRevision,
		LoRA: loraOf(c.LoRA), Step: c.Step, SizeBytes: c.SizeBytes}
}

type artifactView struct {
	outputView
	CheckpointID string                     `json:"checkpoint_id,omitempty"`
	Kind         string                     `json:"kind"`
	Checksum     string                     `json:"checksum"`
	SizeBytes    int64                      `json:"size_bytes"`
	ExportMode   string                     `json:"export_mode"`
	Files        []persistence.ArtifactFile `json:"files"` // the manifest's own JSON shape
}

func artifactOf(a *persistence.Artifact) *artifactView {
	if a == nil {
		return nil
	}
	return &artifactView{outputView: outputOf(&a.Output), CheckpointID: a.CheckpointID, Kind: a.Kind, Checksum: a.Checksum,
		SizeBytes: a.SizeBytes, ExportMode: a.ExportMode, Files: a.Files}
}

type exportView struct {
	ID               string    `json:"id"`
	RunID            string    `json:"run_id"`
	ArtifactID       string    `json:"artifact_id"`
	Status           string    `json:"status"`
	ResultArtifactID string    `json:"result_artifact_id,omitempty"`
	Repo             string    `json:"repo"`
	Revision         string    `json:"revision"`
	Private          bool      `json:"private"`
	CommitOID        string    `json:"commit_oid,omitempty"`
	ErrorCode        string    `json:"error_code,omitempty"`
	ErrorMessage     string    `json:"error_message,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// exportReplyView is an export with the published artifact once it has
// succeeded.
type exportReplyView struct {
	Export   exportView    `json:"export"`
	Artifact *artifactView `json:"artifact,omitempty"`
	Mode     string        `json:"mode"`
}

func exportOf(r *protocol.ExportReply) *exportReplyView {
	e := r.Export
	return &exportReplyView{Mode: r.Mode, Artifact: artifactOf(r.Artifact), Export: exportView{ID: e.ID, RunID: e.RunID, ArtifactID: e.ArtifactID,
		Status: e.Status, ResultArtifactID: e.ResultArtifactID, Repo: e.Repo, Revision: e.Revision, Private: e.Private,
		CommitOID: e.CommitOID, ErrorCode: e.ErrorCode, ErrorMessage: e.ErrorMessage, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}}
}

type usageView struct {
	SessionID        string     `json:"session_id"`
	RunID            string     `json:"run_id"`
	OperationID      string     `json:"operation_id"`
	Provider         string     `json:"provider"`
	Meter            string     `json:"meter"`
	Quantity         int64      `json:"quantity"`
	Unit             string     `json:"unit"`
	UnitPrice        int64      `json:"microusd_per_million_units"`
	CostMicroUSD     int64      `json:"cost_microusd"`
	SettlementStatus string     `json:"settlement_status"`
	ObservedAt       time.Time  `json:"observed_at"`
	SettledAt        *time.Time `json:"settled_at"`
}

func usagesOf(us []persistence.Usage) []usageView {
	out := make([]usageView, len(us))
	for i, u := range us {
		out[i] = usageView{SessionID: u.SessionID, RunID: u.RunID, OperationID: u.OperationID, Provider: u.Provider, Meter: u.Meter,
			Quantity: u.Quantity, Unit: u.Unit, UnitPrice: u.UnitPrice, CostMicroUSD: u.CostMicroUSD, SettlementStatus: u.SettlementStatus,
			ObservedAt: u.ObservedAt, SettledAt: u.SettledAt}
	}
	return out
}

type usagePage struct {
	Items []usageView `json:"items"`
}

type costView struct {
	SessionID            string      `json:"session_id"`
	EstimatedMaxMicroUSD int64       `json:"estimated_max_microusd"`
	SettlementStatus     string      `json:"settlement_status"`
	TotalMicroUSD        any         `json:"total_microusd"` // an integer, or usage.CostPending
	Components           []usageView `json:"components"`
}

func costOf(c *usage.Cost) *costView {
	return &costView{SessionID: c.SessionID, EstimatedMaxMicroUSD: c.EstimatedMaxMicroUSD, SettlementStatus: c.SettlementStatus,
		TotalMicroUSD: c.TotalMicroUSD, Components: usagesOf(c.Components)}
}

// offerView is a provider as GET /v1/training/capabilities shows it: its
// capability row and its room now.
type offerView struct {
	Provider              string                `json:"provider"`
	Available             bool                  `json:"available"`
	DedicatedTrainersFree *int                  `json:"dedicated_trainers_free"`
	Capability            *providers.Capability `json:"capability"`
}

type offersPage struct {
	Items []offerView `json:"items"`
}

func offersOf(list []actors.Offer) *offersPage {
	p := &offersPage{Items: make([]offerView, len(list))}
	for i, o := range list {
		v := offerView{Provider: o.Row.Provider, Available: o.Available, Capability: o.Row}
		if o.FreeDedicated >= 0 {
			v.DedicatedTrainersFree = &o.FreeDedicated
		}
		p.Items[i] = v
	}
	return p
}

// modelView is a catalog model as GET /v1/training/models shows it.
type modelView struct {
	Name       string   `json:"name"`
	Revision   string   `json:"revision"`
	Arch       string   `json:"architecture"`
	Parameters int      `json:"parameters"`
	MaxSeqLen  int      `json:"max_seq_len"`
	Vocab      int      `json:"vocab_size"`
	Hidden     int      `json:"hidden_size"`
	Layers     int      `json:"num_layers"`
	Tokenizer  bool     `json:"tokenizer"`
	Weights    string   `json:"weights"`
	Providers  []string `json:"providers"`
}

type modelsPage struct {
	Items []modelView `json:"items"`
}

func modelsOf(r *providers.Registry) *modelsPage {
	c := r.Catalog()
	p := &modelsPage{Items: []modelView{}}
	for _, name := range c.Names() {
		m, _ := c.Lookup(name)
		p.Items = append(p.Items, modelView{Name: name, Revision: m.Revision, Arch: m.Config.ModelType, Parameters: m.Config.ParamCount(),
			MaxSeqLen: m.Config.MaxPos, Vocab: m.Config.Vocab, Hidden: m.Config.Hidden, Layers: m.Config.Layers,
			Tokenizer: m.Tokenizer, Weights: m.Weights, Providers: r.Offering(name)})
	}
	return p
}

// ledgerView is an organization's ledger (GET /v1/organization/ledger):
// its sums and settings, the formulas' results, and a page of its entries.
type ledgerView struct {
	Organization   string            `json:"organization"`
	Mode           string            `json:"mode"` // test or live: the keys' mode, each with its own ledger
	Balance        int64             `json:"balance_microusd"`
	Granted        int64             `json:"granted_microusd"`
	SettledSpend   int64             `json:"settled_spend_microusd"`
	PendingSpend   int64             `json:"pending_spend_microusd"`
	Reserved       int64             `json:"reserved_microusd"`
	CreditFloor    int64             `json:"credit_floor_microusd"`
	Headroom       int64             `json:"headroom_microusd"`
	DefaultCeiling *int64            `json:"default_ceiling_microusd"`
	ByokCredential *string           `json:"byok_credential_id"` // funds sessions by default
	Reservations   []reservationView `json:"reservations"`
	Entries        []entryView       `json:"entries"`
	NextAfterSeq   int64             `json:"next_after_seq"`
}

// reservationView is a live platform session's reservation.
type reservationView struct {
	SessionID string `json:"session_id"`
	Reserved  int64  `json:"reserved_microusd"` // its max_cost_microusd
	Spent     int64  `json:"spent_microusd"`    // settled or pending
	Held      int64  `json:"held_microusd"`     // its queued and executing operations' estimates
}

type entryView struct {
	Seq       int64     `json:"seq"`
	Kind      string    `json:"kind"`
	Amount    int64     `json:"amount_microusd"`
	SessionID *string   `json:"session_id"`
	Note      *string   `json:"note"`
	At        time.Time `json:"created_at"`
}

func ledgerOf(t persistence.Tenant, st *ledger.Statement) *ledgerView {
	a := &st.Account
	mode := "test"
	if t.Live {
		mode = "live"
	}
	v := &ledgerView{Organization: t.Org, Mode: mode, Balance: a.Balance(), Granted: a.Granted, SettledSpend: a.Settled,
		PendingSpend: a.Pending, Reserved: a.Reserved, CreditFloor: ledger.Floor, Headroom: a.Headroom(),
		DefaultCeiling: a.DefaultCeiling, ByokCredential: orNull(a.ByokCredential), Entries: make([]entryView, len(st.Entries)), NextAfterSeq: st.NextAfterSeq}
	v.Reservations = make([]reservationView, len(st.Reservations))
	for i, r := range st.Reservations {
		v.Reservations[i] = reservationView{SessionID: r.SessionID, Reserved: *r.Budget.Ceiling, Spent: r.Budget.Spent(), Held: r.Budget.Held}
	}
	for i, e := range st.Entries {
		v.Entries[i] = entryView{Seq: e.Seq, Kind: e.Kind, Amount: e.Amount, SessionID: orNull(e.SessionID), Note: orNull(e.Note), At: e.At}
	}
	return v
}

// orNull is s, or null when it is empty.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

type metricView struct {
	SeqID      int64              `json:"seq_id"`
	Kind       string             `json:"kind"`
	Step       int64              `json:"step"`
	Values     map[string]float64 `json:"metrics"`
	DurationMS float64            `json:"duration_ms"`
	CreatedAt  time.Time          `json:"created_at"`
}

func metricOf(m *persistence.Metric) metricView {
	return metricView{SeqID: m.SeqID, Kind: m.Kind, Step: m.Step, Values: m.Values, DurationMS: m.DurationMS, CreatedAt: m.CreatedAt}
}

// pageView is one page of a run's or a sampler's records by seq_id.
type pageView[V any] struct {
	Items        []V   `json:"items"`
	NextAfterSeq int64 `json:"next_after_seq"`
}

func pageOf[T, V any](p *actors.Page[T], view func(*T) V) *pageView[V] {
	out := &pageView[V]{Items: make([]V, len(p.Items)), NextAfterSeq: p.NextAfterSeq}
	for i := range p.Items {
		out.Items[i] = view(&p.Items[i])
	}
	return out
}

type metricsPageView struct {
	pageView[metricView]
	Summary map[string]actors.Summary `json:"summary"`
}

func metricsOf(p *actors.MetricsPage) *metricsPageView {
	return &metricsPageView{pageView: *pageOf(&p.Page, metricOf), Summary: p.Summary}
}

// shown is read with its result in its API shape.
func shown[T, V any](read func(persistence.Tenant, string) (*T, error), view func(*T) *V) func(persistence.Tenant, string) (*V, error) {
	return func(t persistence.Tenant, id string) (*V, error) {
		v, err := read(t, id)
		if err != nil {
			return nil, err
		}
		return view(v), nil
	}
}

// shownPage is a paged list whose page has its own API shape.
func shownPage[P, V any](list func(persistence.Tenant, string, int64, int) (*P, error), view func(*P) *V) func(persistence.Tenant, string, int64, int) (*V, error) {
	return func(t persistence.Tenant, id string, after int64, limit int) (*V, error) {
		p, err := list(t, id, after, limit)
		if err != nil {
			return nil, err
		}
		return view(p), nil
	}
}

// listed is list with its page's records in their API shape.
func listed[T, V any](list func(persistence.Tenant, string, int64, int) (*actors.Page[T], error), view func(*T) V) func(persistence.Tenant, string, int64, int) (*pageView[V], error) {
	return shownPage(list, func(p *actors.Page[T]) *pageView[V] { return pageOf(p, view) })
}
