// Package session is the session grain: one per session, it serialises
// every change to the session and its lease (heartbeats, the lease's expiry
// by reminder, close), creates the session's one run under its capability
// row's admission rules, and ends the run when the session ends. Create
// makes a session.
package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/lease"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/slots"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// reminder is the key of session id's lease-expiry reminder.
func reminder(id string) string { return protocol.ReminderKey(protocol.SessionKind, id) }

// Create creates and provisions a session, or returns the one an
// earlier request with the same request_id created (created is false then).
// The request_id index, the session, its lease, its budget (with the
// reservation of its ceiling on the organization's ledger) and, for
// provider_a, its dedicated trainer are written in one transaction, so two
// racing requests get one session, and two sessions never reserve the
// same headroom or the same trainer.
func Create(n *protocol.Node, req protocol.NewSession) (sess *protocol.Session, created bool, err error) {
	candidates, funding, credentialID, err := fund(n, req)
	if err != nil {
		return nil, false, err
	}
	now := n.Now()
	fresh := &persistence.Session{
		ID: protocol.NewID(protocol.SessionPrefix), Tenant: req.Tenant, RequestID: req.RequestID,
		Status: states.SessionReady, FundingSource: funding, CredentialID: credentialID,
		Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now,
	}
	var l lease.Lease
	key := persistence.RequestKey(req.Tenant, "session", req.RequestID)
	err = n.Store.Update(func(tx persistence.Tx) error {
		rec, isNew, err := persistence.Once(tx, key, persistence.Sessions, fresh.ID, req.BodyHash, fresh, func() error {
			if err := n.Limits.Open(tx, req.Tenant.Org, limits.Sessions); err != nil {
				return err
			}
			if err := route(tx, n, fresh, candidates); err != nil {
				return err
			}
			l = lease.Grant(now, lease.TTL(req.IdleTTLSeconds, providers.LeaseLimit(fresh.Provider)))
			// The ceiling: reserved on the organization's ledger when the
			// platform funds the session.
			ceiling, err := ledger.Open(tx, req.Tenant, fresh.ID, funding == FundingPlatform, req.MaxCostMicroUSD, now)
			fresh.MaxCostMicroUSD = ceiling
			if err != nil {
				return err
			}
			return persistence.List(tx, req.Tenant, "session", fresh.CreatedAt, fresh.ID)
		})
		created = isNew
		if err != nil {
			return err
		}
		stored := &l
		if isNew {
			err = tx.Put(persistence.Leases, []byte(rec.ID), &l)
		} else {
			stored, err = lease.Get(tx, rec.ID)
		}
		sess = protocol.SessionView(rec, stored)
		return err
	})
	if errors.Is(err, persistence.ErrRequestReused) {
		return nil, false, protocol.Reused("session", req.RequestID)
	}
	if err != nil {
		if e := (*protocol.Error)(nil); errors.As(err, &e) {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("create session: %w", err)
	}
	if created {
		n.Reminders.At(reminder(sess.ID), l.ExpiresAt)
	}
	return sess, created, nil
}

// route gives the new session ss the first of the candidate providers
// with room, inside its creation's transaction: provider_a needs a
// dedicated trainer free on some member (reserved here, for the session's
// lifetime), provider_b's shared pool always has room.
func route(tx persistence.Tx, n *protocol.Node, ss *persistence.Session, candidates []string) error {
	for _, p := range candidates {
		ss.Provider, ss.TrainerMember = p, ""
		if providers.Dedicated(p) {
			member, err := slots.Reserve(tx, n.Trainers(), ss.ID)
			if errors.Is(err, slots.ErrFull) {
				continue
			}
			if err != nil {
				return err
			}
			ss.TrainerMember = member
		}
		capability, err := json.Marshal(n.Registry.Row(p))
		if err != nil {
			return fmt.Errorf("encode capability: %w", err)
		}
		ss.Capability, ss.CapabilitySnapshot = capability, capability
		return nil
	}
	return protocol.Refuse(protocol.CodeProviderFull, "%s has no dedicated trainer free (%v); retry later, or ask for provider_b", providers.A, slots.ErrFull)
}

// Funding sources.
const (
	FundingPlatform = "platform" // the service's ledger: the session reserves its ceiling there
	FundingByok     = "byok"     // the customer's own key to the provider
)

// fund resolves a new session's funding, its credential and the providers
// it may go to, in order. A byok session is funded by a provider key of
// the tenant's (the one it names, else the organization's default, `wts
// orgs set --byok-credential`), which also picks its provider: a key works
// only for its own. Funding auto is byok when a credential is named or the
// organization has a default one, else platform; platform names none.
func fund(n *protocol.Node, req protocol.NewSession) (candidates []string, funding, credentialID string, err error) {
	credentialID = req.CredentialID
	if req.Funding == FundingPlatform && credentialID != "" {
		return nil, "", "", protocol.Refuse(protocol.CodeValidation, "credential_id: names a key for byok funding, and funding_preference is platform")
	}
	if req.Funding != FundingPlatform && credentialID == "" {
		if err := n.Store.View(func(tx persistence.Tx) error {
			a, err := ledger.Get(tx, req.Tenant)
			if err == nil {
				credentialID = a.ByokCredential
			}
			return err
		}); err != nil {
			return nil, "", "", err
		}
	}
	if credentialID == "" {
		if req.Funding == FundingByok {
			return nil, "", "", protocol.Refuse(protocol.CodeValidation, "credential_id: is required for byok funding (the organization has no default provider key)")
		}
		candidates, err = n.Registry.Route(req.Provider, req.Preferences)
		if err != nil {
			return nil, "", "", protocol.Refuse(protocol.CodeProviderUnavailable, "%v", err)
		}
		return candidates, FundingPlatform, "", nil
	}
	c, err := persistence.CredentialOf(n.Store, req.Tenant, credentialID, protocol.CredentialProvider)
	if err != nil {
		return nil, "", "", err
	}
	if c == nil {
		return nil, "", "", protocol.Refuse(protocol.CodeCredentialNotFound, "credential %s not found: byok funding needs a provider key, registered with `wts credentials add --provider`", credentialID)
	}
	if req.Provider != "" && req.Provider != "auto" && req.Provider != c.Provider {
		return nil, "", "", protocol.Refuse(protocol.CodeValidation, "credential_id: %s is a %s key, and the session asks for %s", c.ID, c.Provider, req.Provider)
	}
	if candidates, err = n.Registry.Route(c.Provider, nil); err != nil {
		return nil, "", "", protocol.Refuse(protocol.CodeProviderUnavailable, "%v", err)
	}
	return candidates, FundingByok, c.ID, nil
}

// Grain serialises every change to one session and its lease. It
// keeps no copy of them: the run's grain renews the lease in the same
// store, so each change reads, checks and writes them in one transaction.
type Grain struct {
	grain.Base
	N     *protocol.Node
	epoch int64
	// closing: the session waits for its run to end (session.run_ended),
	// so it does not passivate.
	closing bool
}

// New is a session grain of node n: the kind's producer.
func New(n *protocol.Node) actor.Actor { return &Grain{Base: grain.Base{RT: n.Runtime}, N: n} }

func (g *Grain) Receive(ctx actor.Context) {
	if g.Methods == nil {
		g.Methods = map[string]grain.Handler{
			protocol.SessionCreateRun: g.createRun,
			protocol.SessionHeartbeat: g.heartbeat,
			protocol.SessionClose:     g.close,
			protocol.SessionRemind:    g.remind,
			protocol.SessionRunEnded:  g.runEnded,
		}
		g.Idle = func() bool { return !g.closing }
	}
	g.Handle(ctx, g.activate, nil)
}

// activate takes the session's lease: it bumps the lease's epoch, and every
// later write of this activation checks that no newer one has bumped it
// again. A closing session whose run ended meanwhile closes.
func (g *Grain) activate() error {
	return g.N.Store.Update(func(tx persistence.Tx) error {
		ss, l, err := g.load(tx, nil)
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
				g.closing, ss.UpdatedAt = false, g.N.Now()
				if err := g.ended(tx, ss); err != nil {
					return err
				}
				if err := tx.Put(persistence.Sessions, []byte(g.ID), ss); err != nil {
					return err
				}
			}
		}
		return tx.Put(persistence.Leases, []byte(g.ID), l)
	})
}

// ended records, inside tx, that session ss has just ended: its
// organization's live count, its dedicated trainer, its placement record,
// and its budget, whose reservation goes back to the organization's
// ledger.
func (g *Grain) ended(tx persistence.Tx, ss *persistence.Session) error {
	if err := limits.Close(tx, ss.Tenant.Org, limits.Sessions); err != nil {
		return err
	}
	if err := slots.Release(tx, ss.ID); err != nil {
		return err
	}
	if err := cluster.Forget(tx, protocol.SessionKind, g.ID); err != nil {
		return err
	}
	return ledger.End(tx, g.ID, g.N.Now())
}

// load reads the session and its lease inside tx; a session not of tenant
// t (when t is given) is not found.
func (g *Grain) load(tx persistence.Tx, t *persistence.Tenant) (*persistence.Session, *lease.Lease, error) {
	ss := new(persistence.Session)
	if ok, err := tx.Get(persistence.Sessions, []byte(g.ID), ss); err != nil || !ok || (t != nil && ss.Tenant != *t) {
		if err == nil {
			err = protocol.NotFound("session", g.ID)
		}
		return nil, nil, err
	}
	l, err := lease.Get(tx, g.ID)
	return ss, l, err
}

// update applies fn to the session and its lease inside a fenced
// transaction and returns them as written.
func (g *Grain) update(t *persistence.Tenant, fn func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error) (*protocol.Session, error) {
	var out *protocol.Session
	var ended bool
	err := g.N.Store.Update(func(tx persistence.Tx) error {
		ss, l, err := g.load(tx, t)
		if err != nil {
			return err
		}
		if !l.Revoked && l.Epoch != g.epoch {
			return grain.ErrFenced
		}
		was := ss.Status
		if err := fn(tx, ss, l); err != nil {
			return err
		}
		if ss.Status != states.SessionReady {
			l.Revoke() // the session has left ready: its lease ends with it
		}
		ss.UpdatedAt = g.N.Now()
		out = protocol.SessionView(ss, l)
		ended = states.Terminal(states.SessionMoves, ss.Status) && !states.Terminal(states.SessionMoves, was)
		if ended {
			if err := g.ended(tx, ss); err != nil {
				return err
			}
		}
		if err := tx.Put(persistence.Leases, []byte(g.ID), l); err != nil {
			return err
		}
		return tx.Put(persistence.Sessions, []byte(g.ID), ss)
	})
	if err != nil {
		return nil, err
	}
	g.closing = out.Status == states.SessionClosing
	if out.Status != states.SessionReady {
		g.N.Reminders.Cancel(reminder(g.ID))
	}
	return out, nil
}

// live refuses a session that cannot take new work.
func (g *Grain) live(ss *persistence.Session, l *lease.Lease) error {
	if ss.Status != states.SessionReady {
		return protocol.Refuse(protocol.CodeSessionNotReady, "session %s is %s", ss.ID, ss.Status)
	}
	if !l.Live(g.N.Now()) {
		return protocol.Refuse(protocol.CodeSessionNotReady, "session %s lease expired at %s", ss.ID, l.ExpiresAt.Format(time.RFC3339))
	}
	return nil
}

func (g *Grain) heartbeat(_ actor.Context, in grain.In) (any, error) {
	t, err := grain.Decode[persistence.Tenant](in)
	if err != nil {
		return nil, err
	}
	return g.update(t, func(_ persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		if err := g.live(ss, l); err != nil {
			return err
		}
		l.Renew(g.N.Now(), 0)
		return nil
	})
}

func (g *Grain) createRun(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[protocol.NewRun](in)
	if err != nil {
		return nil, err
	}
	// A run from a checkpoint gets the checkpoint's files linked into its
	// training volume before its record exists, so the run never depends on
	// another run's artifact prefix; the link is undone if no run was made.
	id := protocol.NewID(protocol.RunPrefix)
	if req.CheckpointID != "" {
		cp, err := artifacts.GetCheckpoint(g.N.Store, req.Tenant, req.CheckpointID)
		if err != nil {
			return nil, err
		}
		if err := artifacts.Available(cp); err != nil { // its files are gone; newRun checks the rest
			return nil, err
		}
		if err := persistence.LinkDir(g.N.Volume.CheckpointDir(cp.RunID, cp.ID), g.N.Volume.InitialDir(id)); err != nil {
			return nil, fmt.Errorf("link checkpoint %s: %w", cp.ID, err)
		}
	}
	var out protocol.RunReply
	defer func() {
		if req.CheckpointID != "" && !out.Created {
			os.RemoveAll(filepath.Dir(g.N.Volume.InitialDir(id)))
		}
	}()
	_, err = g.update(&req.Tenant, func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		out = protocol.RunReply{}
		if ss.RunID != "" {
			if _, err := persistence.GetRun(tx, ss.RunID, &out.Run); err != nil {
				return err
			}
			if out.Run.RequestID == req.RequestID {
				if !persistence.SameRequest(out.Run.RequestHash, req.BodyHash) {
					return protocol.Reused("run", req.RequestID)
				}
				return nil
			}
			return protocol.Refuse(protocol.CodeRunExists, "session %s already has run %s (a session owns exactly one run)", ss.ID, ss.RunID)
		}
		if err := g.live(ss, l); err != nil {
			return err
		}
		run, err := g.newRun(tx, ss, req, id)
		if err != nil {
			return err
		}
		if err := g.N.Limits.Open(tx, req.Tenant.Org, limits.Runs); err != nil {
			return err
		}
		ss.RunID = run.ID
		out = protocol.RunReply{Run: *run, Created: true}
		if ss.TrainerMember != "" { // on its dedicated trainer's member
			if err := cluster.Pin(tx, protocol.RunKind, run.ID, ss.TrainerMember); err != nil {
				return err
			}
		}
		return persistence.CreateRun(tx, run)
	})
	return &out, err
}

// newRun applies the model admission rules of the session's capability row.
func (g *Grain) newRun(tx persistence.Tx, ss *persistence.Session, req *protocol.NewRun, id string) (*persistence.Run, error) {
	var row providers.Capability
	if err := json.Unmarshal(ss.CapabilitySnapshot, &row); err != nil {
		return nil, fmt.Errorf("session capability: %w", err)
	}
	m, ok := g.N.Registry.Catalog().Lookup(req.BaseModel)
	if !ok || !slices.Contains(row.Models, req.BaseModel) {
		return nil, protocol.Refuse(protocol.CodeModelUnavailable, "base_model %q is not offered by %s (models: %v)", req.BaseModel, ss.Provider, row.Models)
	}
	if !providers.CheckRevision(ss.Provider, m, req.ModelRevision) {
		return nil, protocol.Refuse(protocol.CodeRevisionMismatch, "model_revision %q is not %s's catalog commit for %s (%s)", req.ModelRevision, ss.Provider, m.Name, m.Revision)
	}
	if req.TuningMode == "full" || req.LoRA == nil {
		return nil, protocol.Refuse(protocol.CodeTuningMode, "tuning_mode full is not admitted: the qualified capability rows admit only lora")
	}
	prof := row.ResourceProfiles[providers.DefaultProfile]
	if req.LoRA.Rank > prof.MaxLoRARank {
		return nil, protocol.Refuse(protocol.CodeValidation, "lora.rank: must be at most %d", prof.MaxLoRARank)
	}
	if err := executor.LoRAConfig(req.LoRA).Validate(); err != nil {
		return nil, protocol.Refuse(protocol.CodeValidation, "lora: %v", err)
	}
	if err := g.N.Memory.Fits("the run's trainer", executor.TrainerBytes(m.Config, req.LoRA)); err != nil {
		return nil, err
	}
	if req.CheckpointID != "" {
		cp, err := artifacts.CheckpointIn(tx, req.CheckpointID)
		if err != nil {
			return nil, err
		}
		if err := artifacts.Usable(cp, ss.Tenant, m.Name, m.Revision, *req.LoRA); err != nil {
			return nil, err
		}
	}
	now := g.N.Now()
	return &persistence.Run{
		ID: id, SessionID: ss.ID, Tenant: ss.Tenant, RequestID: req.RequestID, RequestHash: req.BodyHash,
		Status: states.RunCreated, BaseModel: m.Name, ModelRevision: m.Revision, ResourceProfile: providers.DefaultProfile,
		TuningMode: "lora", LoRA: *req.LoRA, CheckpointID: req.CheckpointID, NextSeqID: 1, Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now,
	}, nil
}

func (g *Grain) close(_ actor.Context, in grain.In) (any, error) {
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
func (g *Grain) remind(actor.Context, grain.In) (any, error) {
	var ss *persistence.Session
	var l *lease.Lease
	if err := g.N.Store.View(func(tx persistence.Tx) (err error) {
		ss, l, err = g.load(tx, nil)
		return err
	}); err != nil {
		return nil, err
	}
	switch {
	case ss.Status != states.SessionReady || l.Revoked:
		return struct{}{}, nil
	case !g.N.Now().After(l.ExpiresAt):
		g.N.Reminders.At(reminder(g.ID), l.ExpiresAt)
		return struct{}{}, nil
	}
	if ss.RunID != "" {
		busy, err := g.N.Run(ss.RunID).Busy()
		if err != nil {
			return nil, err
		}
		if busy {
			out, err := g.update(nil, func(_ persistence.Tx, _ *persistence.Session, l *lease.Lease) error {
				l.Renew(g.N.Now(), 0)
				return nil
			})
			if err == nil {
				g.N.Reminders.At(reminder(g.ID), out.LeaseExpiresAt)
			}
			return out, err
		}
	}
	return g.end(nil, states.SessionTimedOut, states.RunTimedOut, protocol.CodeTimedOut)
}

// end moves the session to status and ends its run with runStatus. A closing
// session becomes closed once the run has ended (run_ended).
func (g *Grain) end(t *persistence.Tenant, status, runStatus, code string) (*protocol.Session, error) {
	var runID string
	ss, err := g.update(t, func(tx persistence.Tx, ss *persistence.Session, l *lease.Lease) error {
		runID = ""
		if ss.Status == status || ss.Status == states.SessionClosed && status == states.SessionClosing {
			return nil // a repeat
		}
		if status == states.SessionTimedOut && l.Live(g.N.Now()) {
			return nil // renewed after the reminder saw it expired
		}
		if err := states.Move(states.SessionMoves, &ss.Status, status); err != nil {
			return protocol.Refuse(protocol.CodeInvalidState, "session %s is %s", ss.ID, ss.Status)
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
	err = g.N.Run(runID).End(protocol.RunEnd{Status: runStatus, Code: code})
	return ss, err
}

// runEnded closes a closing session once its run has ended.
func (g *Grain) runEnded(actor.Context, grain.In) (any, error) {
	return g.update(nil, func(_ persistence.Tx, ss *persistence.Session, _ *lease.Lease) error {
		if ss.Status == states.SessionClosing {
			return states.Move(states.SessionMoves, &ss.Status, states.SessionClosed)
		}
		return nil
	})
}
