package actors

import (
	"strings"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/session"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers/ledger"
)

// The front door's writes: each goes to the grain (or, for exports, the
// exporter) whose record it changes, which admits it.

// CreateSession creates and provisions a session, or returns the one an
// earlier request with the same request_id created (created is false then).
func (s *System) CreateSession(req protocol.NewSession) (*protocol.Session, bool, error) {
	return session.Create(s.n, req)
}

// CreateRun creates the session's one run.
func (s *System) CreateRun(req protocol.NewRun) (*protocol.RunReply, error) {
	return s.n.Session(req.SessionID).CreateRun(req)
}

// Heartbeat extends a session's lease.
func (s *System) Heartbeat(t persistence.Tenant, id string) (*protocol.Session, error) {
	return s.n.Session(id).Heartbeat(t)
}

// CloseSession closes a session: its run is cancelled if it is still live,
// and the session is closed once the run has ended.
func (s *System) CloseSession(t persistence.Tenant, id string) (*protocol.Session, error) {
	return s.n.Session(id).Close(t)
}

// Submit hands a submission to its run's grain, which admits it durably.
func (s *System) Submit(sub protocol.Submission) (*protocol.Accepted, error) {
	return s.n.Run(sub.Target).Submit(sub)
}

// Finish asks the run to finish once its queued operations have run.
func (s *System) Finish(t persistence.Tenant, runID, requestID string) (*protocol.Accepted, error) {
	return s.n.Run(runID).Finish(protocol.Control{Tenant: t, RequestID: requestID})
}

// Cancel cancels the run's pending and executing operations and ends it.
func (s *System) Cancel(t persistence.Tenant, runID, requestID string) (*protocol.Accepted, error) {
	return s.n.Run(runID).Cancel(protocol.Control{Tenant: t, RequestID: requestID})
}

// Retire removes a terminal run's artifact prefix and retires its sampler
// (see the run grain's retire).
func (s *System) Retire(t persistence.Tenant, runID, requestID string) (*protocol.RetireReply, error) {
	return s.n.Run(runID).Retire(protocol.Control{Tenant: t, RequestID: requestID})
}

// SubmitToSampler hands a sampler operation to the sampler's grain, which
// admits it durably.
func (s *System) SubmitToSampler(sub protocol.Submission) (*protocol.Accepted, error) {
	return s.n.Sampler(sub.Target).Submit(sub)
}

// CancelOperation cancels one sampler operation: a queued (pending or
// parked) one at once, an executing one at its next decoding step; one
// that has ended is answered as it is. A run's operations are ordered, so
// they are cancelled with their run (POST /runs/{id}/cancel), not one by
// one.
func (s *System) CancelOperation(t persistence.Tenant, id string) (*persistence.Operation, error) {
	op, err := s.GetOperation(t, id)
	if err != nil {
		return nil, err
	}
	var key []byte
	if err := s.n.Store.View(func(tx persistence.Tx) error {
		_, err := tx.Get(persistence.Index, []byte(id), &key)
		return err
	}); err != nil {
		return nil, err
	}
	owner := string(key[:max(0, len(key)-8)])
	if !strings.HasPrefix(owner, protocol.SamplerPrefix) {
		return nil, protocol.Refuse(protocol.CodeInvalidState, "operation %s is run %s's: a run's operations are ordered, so cancel the run (POST /v1/training/runs/%s/cancel)", id, op.RunID, op.RunID)
	}
	if states.Terminal(states.OpMoves, op.Status) {
		return op, nil
	}
	return s.n.Sampler(owner).CancelOp(op.SeqID)
}

// CreateExport accepts the publication of a run's LoRA artifact to a hub.
func (s *System) CreateExport(req protocol.NewExport) (*protocol.ExportReply, bool, error) {
	return s.exports.Create(req)
}

// GetExport reads an export of tenant t.
func (s *System) GetExport(t persistence.Tenant, id string) (*protocol.ExportReply, error) {
	return s.exports.Get(t, id)
}

// AddCredential seals and stores a secret of tenant t (the admin path): a
// hub token, or a key to provider (kind protocol.CredentialProvider).
func (s *System) AddCredential(t persistence.Tenant, kind, provider, name string, secret []byte) (*persistence.Credential, error) {
	return s.exports.AddCredential(t, kind, provider, name, secret)
}

// Downloadable lists the files of tenant t's artifact in format, to sign
// links to (a merged folder is built on the trainer's executor the first
// time).
func (s *System) Downloadable(t persistence.Tenant, artifactID, format string) (*persistence.Artifact, []persistence.ArtifactFile, error) {
	return artifacts.Downloadable(s.n, t, artifactID, format)
}

// FilePath is where file name of artifact id in format lives, for a signed
// link.
func (s *System) FilePath(artifactID, format, name string) (string, error) {
	return artifacts.FilePath(s.n, artifactID, format, name)
}

// Usage lists a session's usage components in operation order.
func (s *System) Usage(t persistence.Tenant, sessionID string) ([]persistence.Usage, error) {
	return usage.List(s.n.Store, t, sessionID)
}

// Cost sums a session's usage.
func (s *System) Cost(t persistence.Tenant, sessionID string) (*usage.Cost, error) {
	return usage.CostOf(s.n.Store, t, sessionID)
}

// Ledger reads tenant t's ledger: its account and up to limit of its
// entries after seq after.
func (s *System) Ledger(t persistence.Tenant, after int64, limit int) (*ledger.Statement, error) {
	return ledger.StatementOf(s.n.Store, t, after, limit)
}
