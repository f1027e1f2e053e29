package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

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
}

// Session is a session as the API shows it: its record and its lease.
type Session struct {
	persistence.Session
	LeaseEpoch     int64     `json:"lease_epoch"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	IdleTTLSeconds int64     `json:"idle_ttl_s"`
}

// sessionView is ss with its lease l.
func sessionView(ss *persistence.Session, l *lease.Lease) *Session {
	return &Session{Session: *ss, LeaseEpoch: l.Epoch, LeaseExpiresAt: l.ExpiresAt, IdleTTLSeconds: l.TTLSeconds}
}

// getLease reads session id's lease inside tx.
func getLease(tx persistence.Tx, id string) (*lease.Lease, error) {
	l := new(lease.Lease)
	ok, err := tx.Get(persistence.Leases, []byte(id), l)
	if err == nil && !ok {
		err = fmt.Errorf("session %s has no lease record", id)
	}
	return l, err
}

// sessionReminder is the reminder key of session id's lease expiry.
func sessionReminder(id string) string { return sessionKind + "/" + id }

// CreateSession creates and provisions a session, or returns the one an
// earlier request with the same request_id created (created is false then).
// The request_id index, the session and its lease are written in one
// transaction, so two racing requests get one session.
func (s *System) CreateSession(req NewSession) (sess *Session, created bool, err error) {
	provider, err := s.cfg.Registry.Route(req.Provider, req.Preferences)
	if err != nil {
		return nil, false, refuse(CodeProviderUnavailable, "%v", err)
	}
	funding, err := providers.Funding(req.Funding, req.CredentialID)
	switch {
	case errors.Is(err, providers.ErrCredentialRequired):
		return nil, false, refuse(CodeValidation, "credential_id: is required for byok funding")
	case errors.Is(err, providers.ErrCredentialUnknown):
		return nil, false, refuse(CodeCredentialNotFound, "credential %s not found", req.CredentialID)
	case err != nil:
		return nil, false, err
	}
	ceiling := req.MaxCostMicroUSD
	if ceiling == nil && funding == "platform" {
		c := providers.DefaultCeiling
		ceiling = &c
	}
	capability, err := json.Marshal(s.cfg.Registry.Row(provider))
	if err != nil {
		return nil, false, fmt.Errorf("encode capability: %w", err)
	}
	now := s.now()
	l := lease.Grant(now, lease.TTL(req.IdleTTLSeconds, providers.LeaseLimit(provider)))
	fresh := &persistence.Session{
		ID: NewID(SessionPrefix), Tenant: req.Tenant, RequestID: req.RequestID,
		Status: states.SessionReady, Provider: provider, FundingSource: funding, CredentialID: req.CredentialID,
		MaxCostMicroUSD: ceiling, Capability: capability, CapabilitySnapshot: capability,
		Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now,
	}
	key := requestKey(req.Tenant, "session", req.RequestID)
	err = s.store.Update(func(tx persistence.Tx) error {
		rec, isNew, err := once(tx, key, persistence.Sessions, fresh.ID, fresh, func() error { return s.adm.open(req.Tenant.Org, sessionKind) })
		created = isNew
		if err != nil {
			return err
		}
		stored := &l
		if isNew {
			err = tx.Put(persistence.Leases, []byte(rec.ID), &l)
		} else {
			stored, err = getLease(tx, rec.ID)
		}
		sess = sessionView(rec, stored)
		return err
	})
	if err != nil {
		if created { // counted live, but not stored
			s.adm.close(req.Tenant.Org, sessionKind)
		}
		if e := (*Error)(nil); errors.As(err, &e) {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("create session: %w", err)
	}
	if created {
		s.reminders.At(sessionReminder(sess.ID), l.ExpiresAt)
	}
	return sess, created, nil
}

// once stores fresh (whose id is id) in bucket b the first time the
// request key is seen, and later reads back what that first time stored; it
// says whether this call stored it (or, with an error, tried to). admit,
// when set, may refuse a new record before anything is written (a limit).
func once[T any](tx persistence.Tx, key []byte, b persistence.Bucket, id string, fresh *T, admit func() error) (*T, bool, error) {
	var prev string
	if ok, err := tx.Get(persistence.Requests, key, &prev); err != nil || ok {
		if err != nil {
			return nil, false, err
		}
		v := new(T)
		_, err := tx.Get(b, []byte(prev), v)
		return v, false, err
	}
	if admit != nil {
		if err := admit(); err != nil {
			return nil, false, err
		}
	}
	if err := tx.Put(persistence.Requests, key, id); err != nil {
		return nil, true, err
	}
	return fresh, true, tx.Put(b, []byte(id), fresh)
}

// requestKey is the request_id index key of a creation in a scope.
func requestKey(t persistence.Tenant, scope, requestID string) []byte {
	return fmt.Appendf(nil, "%s\x00%t\x00%s\x00%s", t.Org, t.Live, scope, requestID)
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
}

// RunReply is a session grain's answer to a run creation.
type RunReply struct {
	Run     persistence.Run
	Created bool
}

// CreateRun creates the session's one run.
func (s *System) CreateRun(req NewRun) (*RunReply, error) {
	return s.session(req.SessionID).createRun(req)
}

// Heartbeat extends a session's lease.
func (s *System) Heartbeat(t persistence.Tenant, id string) (*Session, error) {
	return s.session(id).heartbeat(t)
}

// CloseSession closes a session: its run is cancelled if it is still live,
// and the session is closed once the run has ended.
func (s *System) CloseSession(t persistence.Tenant, id string) (*Session, error) {
	return s.session(id).close(t)
}

// sessionGrain serialises every change to one session and its lease. It
// keeps no copy of them: the run's grain renews the lease in the same
// store, so each change reads, checks and writes them in one transaction.
type sessionGrain struct {
	base
	epoch int64
	// closing: the session waits for its run to end (session.run_ended),
	// so it does not passivate.
	closing bool
}

func (g *sessionGrain) Receive(ctx actor.Context) {
	if g.Methods == nil {
		g.Methods = map[string]grain.Handler{
			sessionCreateRun:        g.createRun,
			sessionHeartbeat:        g.heartbeat,
			sessionClose:            g.close,
			sessionKind + remindMsg: g.remind,
			sessionRunEnded:         g.runEnded,
		}
		g.Idle = func() bool { return !g.closing }
	}
	g.Handle(ctx, g.activate, nil)
}

// activate takes the session's lease: it bumps the lease's epoch, and every
// later write of this activation checks that no newer one has bumped it
// again. A closing session whose run ended meanwhile closes.
func (g *sessionGrain) activate() error {
	return g.sys.store.Update(func(tx persistence.Tx) error {
		var ss persistence.Session
		if ok, err := tx.Get(persistence.Sessions, []byte(g.ID), &ss); err != nil || !ok {
			if err == nil {
				err = notFound("session", g.ID)
			}
			return err
		}
		l, err := getLease(tx, g.ID)
		if err != nil {
			return err
		}
		if !l.Revoked {
			l.Epoch++
		}
		g.epoch, g.closing = l.Epoch, ss.Status == states.SessionClosing
		if g.closing && ss.RunID != "" {
			var r persistence.Run
			if _, err := tx.Get(persistence.Runs, []byte(ss.RunID), &r); err != nil {
				return err
			}
			if states.Terminal(states.RunMoves, r.Status) {
				if err := states.Move(states.SessionMoves, &ss.Status, states.SessionClosed); err != nil {
					return err
				}
				g.closing, ss.UpdatedAt = false, g.sys.now()
				if err := tx.Put(persistence.Sessions, []byte(g.ID), &ss); err != nil {
					return err
				}
			}
		}
		return tx.Put(persistence.Leases, []byte(g.ID), l)
	})
}

// update applies fn to the session and its lease inside a fenced
// transaction and returns them as written.
func (g *sessionGrain) update(t *persistence.Tenant, fn func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error) (*Session, error) {
	var out *Session
	var ended bool
	err := g.sys.store.Update(func(tx persistence.Tx) error {
		ss := persistence.Session{}
		if ok, err := tx.Get(persistence.Sessions, []byte(g.ID), &ss); err != nil || !ok || (t != nil && ss.Tenant != *t) {
			if err == nil {
				err = notFound("session", g.ID)
			}
			return err
		}
		l, err := getLease(tx, g.ID)
		if err != nil {
			return err
		}
		if !l.Revoked && l.Epoch != g.epoch {
			return errFenced
		}
		was := ss.Status
		if err := fn(tx, &ss, l); err != nil {
			return err
		}
		if ss.Status != states.SessionReady {
			l.Revoke() // the session has left ready: its lease ends with it
		}
		ss.UpdatedAt = g.sys.now()
		out = sessionView(&ss, l)
		ended = states.Terminal(states.SessionMoves, ss.Status) && !states.Terminal(states.SessionMoves, was)
		if err := tx.Put(persistence.Leases, []byte(g.ID), l); err != nil {
			return err
		}
		return tx.Put(persistence.Sessions, []byte(g.ID), &ss)
	})
	if err != nil {
		return nil, err
	}
	if ended {
		g.sys.adm.close(out.Tenant.Org, sessionKind)
	}
	g.closing = out.Status == states.SessionClosing
	if out.Status != states.SessionReady {
		g.sys.reminders.Cancel(sessionReminder(g.ID))
	}
	return out, nil
}

// live refuses a session that cannot take new work.
func (g *sessionGrain) live(ss *persistence.Session, l *lease.Lease) error {
	if ss.Status != states.SessionReady {
		return refuse(CodeSessionNotReady, "session %s is %s", ss.ID, ss.Status)
	}
	if !l.Live(g.sys.now()) {
		return refuse(CodeSessionNotReady, "session %s lease expired at %s", ss.ID, l.ExpiresAt.Format(time.RFC3339))
	}
	return nil
}

func (g *sessionGrain) heartbeat(_ actor.Context, in grain.In) (any, error) {
	t, err := grain.Decode[persistence.Tenant](in)
	if err != nil {
		return nil, err
	}
	return g.update(t, func(_ persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		if err := g.live(ss, l); err != nil {
			return err
		}
		l.Renew(g.sys.now(), 0)
		return nil
	})
}

func (g *sessionGrain) createRun(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[NewRun](in)
	if err != nil {
		return nil, err
	}
	// A run from a checkpoint gets the checkpoint's files linked into its
	// training volume before its record exists, so the run never depends on
	// another run's artifact prefix; the link is undone if no run was made.
	id := NewID(RunPrefix)
	if req.CheckpointID != "" {
		cp, err := g.sys.GetCheckpoint(req.Tenant, req.CheckpointID)
		if err != nil {
			return nil, err
		}
		if err := available(cp); err != nil { // its files are gone; newRun checks the rest
			return nil, err
		}
		if err := persistence.LinkDir(g.sys.volume.CheckpointDir(cp.RunID, cp.ID), g.sys.volume.InitialDir(id)); err != nil {
			return nil, fmt.Errorf("link checkpoint %s: %w", cp.ID, err)
		}
	}
	var out RunReply
	defer func() {
		if req.CheckpointID != "" && !out.Created {
			os.RemoveAll(filepath.Dir(g.sys.volume.InitialDir(id)))
		}
	}()
	_, err = g.update(&req.Tenant, func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		out = RunReply{}
		if ss.RunID != "" {
			if _, err := persistence.GetRun(tx, ss.RunID, &out.Run); err != nil {
				return err
			}
			if out.Run.RequestID == req.RequestID {
				return nil
			}
			return refuse(CodeRunExists, "session %s already has run %s (a session owns exactly one run)", ss.ID, ss.RunID)
		}
		if err := g.live(ss, l); err != nil {
			return err
		}
		run, err := g.newRun(tx, ss, req, id)
		if err != nil {
			return err
		}
		if err := g.sys.adm.open(ss.Tenant.Org, runKind); err != nil {
			return err
		}
		ss.RunID = run.ID
		out = RunReply{Run: *run, Created: true}
		return persistence.CreateRun(tx, run)
	})
	if err != nil && out.Created {
		g.sys.adm.close(req.Tenant.Org, runKind)
	}
	return &out, err
}

// newRun applies the model admission rules of the session's capability row.
func (g *sessionGrain) newRun(tx persistence.Tx, ss *persistence.Session, req *NewRun, id string) (*persistence.Run, error) {
	var row providers.Capability
	if err := json.Unmarshal(ss.CapabilitySnapshot, &row); err != nil {
		return nil, fmt.Errorf("session capability: %w", err)
	}
	m, ok := g.sys.cfg.Registry.Catalog().Lookup(req.BaseModel)
	if !ok || !slices.Contains(row.Models, req.BaseModel) {
		return nil, refuse(CodeModelUnavailable, "base_model %q is not offered by %s (models: %v)", req.BaseModel, ss.Provider, row.Models)
	}
	if !providers.CheckRevision(ss.Provider, m, req.ModelRevision) {
		return nil, refuse(CodeRevisionMismatch, "model_revision %q is not %s's catalog commit for %s (%s)", req.ModelRevision, ss.Provider, m.Name, m.Revision)
	}
	if req.TuningMode == "full" || req.LoRA == nil {
		return nil, refuse(CodeTuningMode, "tuning_mode full is not admitted: the qualified capability rows admit only lora")
	}
	prof := row.ResourceProfiles[providers.DefaultProfile]
	if req.LoRA.Rank > prof.MaxLoRARank {
		return nil, refuse(CodeValidation, "lora.rank: must be at most %d", prof.MaxLoRARank)
	}
	if err := executor.LoRAConfig(req.LoRA).Validate(); err != nil {
		return nil, refuse(CodeValidation, "lora: %v", err)
	}
	if err := g.sys.mem.Fits("the run's trainer", executor.TrainerBytes(m.Config, req.LoRA)); err != nil {
		return nil, err
	}
	if req.CheckpointID != "" {
		cp, err := checkpointIn(tx, req.CheckpointID)
		if err != nil {
			return nil, err
		}
		if err := usable(cp, ss.Tenant, m.Name, m.Revision, *req.LoRA); err != nil {
			return nil, err
		}
	}
	now := g.sys.now()
	return &persistence.Run{
		ID: id, SessionID: ss.ID, Tenant: ss.Tenant, RequestID: req.RequestID,
		Status: states.RunCreated, BaseModel: m.Name, ModelRevision: m.Revision, ResourceProfile: providers.DefaultProfile,
		TuningMode: "lora", LoRA: *req.LoRA, CheckpointID: req.CheckpointID, NextSeqID: 1, Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now,
	}, nil
}

func (g *sessionGrain) close(_ actor.Context, in grain.In) (any, error) {
	t, err := grain.Decode[persistence.Tenant](in)
	if err != nil {
		return nil, err
	}
	return g.end(t, states.SessionClosing, states.RunCancelled, "")
}

// remind is the lease's reminder: a lease renewed since it was armed arms
// it again at its new deadline; one that ran out while the session's run
// still has work queued or executing is renewed instead (that work is
// activity); otherwise the session times out.
func (g *sessionGrain) remind(actor.Context, grain.In) (any, error) {
	var ss persistence.Session
	var l *lease.Lease
	if err := g.sys.store.View(func(tx persistence.Tx) (err error) {
		if _, err = tx.Get(persistence.Sessions, []byte(g.ID), &ss); err != nil {
			return err
		}
		l, err = getLease(tx, g.ID)
		return err
	}); err != nil {
		return nil, err
	}
	switch {
	case ss.Status != states.SessionReady || l.Revoked:
		return struct{}{}, nil
	case !g.sys.now().After(l.ExpiresAt):
		g.sys.reminders.At(sessionReminder(g.ID), l.ExpiresAt)
		return struct{}{}, nil
	}
	if ss.RunID != "" {
		busy, err := g.sys.run(ss.RunID).busy()
		if err != nil {
			return nil, err
		}
		if busy {
			out, err := g.update(nil, func(_ persistence.Tx, _ *persistence.Session, l *lease.Lease) error {
				l.Renew(g.sys.now(), 0)
				return nil
			})
			if err == nil {
				g.sys.reminders.At(sessionReminder(g.ID), out.LeaseExpiresAt)
			}
			return out, err
		}
	}
	return g.end(nil, states.SessionTimedOut, states.RunTimedOut, CodeTimedOut)
}

// end moves the session to status and ends its run with runStatus. A closing
// session becomes closed once the run has ended (run_ended).
func (g *sessionGrain) end(t *persistence.Tenant, status, runStatus, code string) (*Session, error) {
	var runID string
	ss, err := g.update(t, func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		runID = ""
		if ss.Status == status || ss.Status == states.SessionClosed && status == states.SessionClosing {
			return nil // a repeat
		}
		if status == states.SessionTimedOut && l.Live(g.sys.now()) {
			return nil // renewed after the reminder saw it expired
		}
		if err := states.Move(states.SessionMoves, &ss.Status, status); err != nil {
			return refuse(CodeInvalidState, "session %s is %s", ss.ID, ss.Status)
		}
		ss.ErrorCode = code
		if ss.RunID != "" {
			var r persistence.Run
			if _, err := tx.Get(persistence.Runs, []byte(ss.RunID), &r); err != nil {
				return err
			}
			if !states.Terminal(states.RunMoves, r.Status) {
				runID = r.ID
				return nil
			}
		}
		if ss.Status == states.SessionClosing {
			return states.Move(states.SessionMoves, &ss.Status, states.SessionClosed)
		}
		return nil
	})
	if err != nil || runID == "" {
		return ss, err
	}
	err = g.sys.run(runID).end(runEnd{Status: runStatus, Code: code})
	return ss, err
}

// runEnded closes a closing session once its run has ended.
func (g *sessionGrain) runEnded(actor.Context, grain.In) (any, error) {
	return g.update(nil, func(_ persistence.Tx, ss *persistence.Session, _ *lease.Lease) error {
		if ss.Status == states.SessionClosing {
			return states.Move(states.SessionMoves, &ss.Status, states.SessionClosed)
		}
		return nil
	})
}
