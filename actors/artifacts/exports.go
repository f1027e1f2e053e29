package artifacts

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers/hub"
)

// defaultExportWait bounds one export, all files included.
const defaultExportWait = 10 * time.Minute

// exportClaim is how long an exporter's claim on an export lasts unless it
// renews it (at a third of it, while it uploads): another node's exporter
// takes an upload over once the claim has lapsed (its node died), and
// every exporter looks for such work this often.
const exportClaim = 30 * time.Second

// errClaimed is an export another exporter holds: not this one's to do.
var errClaimed = errors.New("claimed by another exporter")

// Exports publishes LoRA artifacts to a hub, one at a time, oldest first,
// from the exports accepted into the store.
type Exports struct {
	N        *protocol.Node
	Vault    *persistence.Vault
	Endpoint string        // the hub's
	wake     chan struct{} // tells the exporter there is work
	self     string        // this exporter's claim mark, new in every process
}

// NewExports is the exports of node n, sealed with vault, to the hub at
// endpoint; Run publishes them.
func NewExports(n *protocol.Node, vault *persistence.Vault, endpoint string) *Exports {
	return &Exports{N: n, Vault: vault, Endpoint: endpoint, wake: make(chan struct{}, 1), self: rand.Text()}
}

// Create accepts the publication of a run's LoRA artifact to a hub
// repository with one of the caller's registered hub credentials; a repeat
// of its request_id returns the first export.
func (s *Exports) Create(req protocol.NewExport) (*protocol.ExportReply, bool, error) {
	if err := ownRun(s.N.Store, req.Tenant, req.RunID); err != nil {
		return nil, false, err
	}
	a, err := GetArtifact(s.N.Store, req.Tenant, req.ArtifactID)
	if err != nil {
		return nil, false, err
	}
	switch {
	case a.RunID != req.RunID:
		return nil, false, protocol.Refuse(protocol.CodeNotEligible, "artifact %s belongs to run %s, not %s", a.ID, a.RunID, req.RunID)
	case a.Kind != executor.ArtifactLoRA:
		return nil, false, protocol.Refuse(protocol.CodeNotEligible, "artifact %s is a %s; only LoRA adapters can be published to a hub", a.ID, a.Kind)
	case a.Status != states.Available:
		return nil, false, protocol.Refuse(protocol.CodeArtifactRetired, "artifact %s was retired with its run", a.ID)
	}
	if _, err := s.credential(req.Tenant, req.CredentialID, protocol.CredentialHub); err != nil {
		return nil, false, err
	}
	now := s.N.Now()
	fresh := &persistence.Export{ID: protocol.NewID(protocol.ExportPrefix), Tenant: req.Tenant, RequestID: req.RequestID, RunID: req.RunID,
		ArtifactID: a.ID, Status: states.ExportPending, Repo: req.Repo, Revision: req.Revision, Private: req.Private,
		CredentialID: req.CredentialID, CreatedAt: now, UpdatedAt: now}
	key := persistence.RequestKey(req.Tenant, "export\x00"+req.RunID, req.RequestID)
	var ex *persistence.Export
	var created bool
	err = s.N.Store.Update(func(tx persistence.Tx) (err error) {
		ex, created, err = persistence.Once(tx, key, persistence.Exports, fresh.ID, req.BodyHash, fresh, nil)
		return err
	})
	if errors.Is(err, persistence.ErrRequestReused) {
		return nil, false, protocol.Reused("export", req.RequestID)
	}
	if err != nil {
		return nil, false, fmt.Errorf("create export: %w", err)
	}
	if created {
		select {
		case s.wake <- struct{}{}:
		default: // already woken: it will find this one too
		}
	}
	reply, err := s.exportReply(ex)
	return reply, created, err
}

// Get reads an export of tenant t.
func (s *Exports) Get(t persistence.Tenant, id string) (*protocol.ExportReply, error) {
	ex, err := s.export(id)
	if err != nil {
		return nil, err
	}
	if ex == nil || ex.Tenant != t {
		return nil, protocol.NotFound("export", id)
	}
	return s.exportReply(ex)
}

func (s *Exports) exportReply(ex *persistence.Export) (*protocol.ExportReply, error) {
	r := &protocol.ExportReply{Export: ex, Mode: protocol.ExportModeLoRA}
	if ex.Status == states.ExportSucceeded {
		a, err := Artifact(s.N.Store, ex.ResultArtifactID)
		if err != nil {
			return nil, err
		}
		r.Artifact = a
	}
	return r, nil
}

func (s *Exports) export(id string) (*persistence.Export, error) {
	ex := new(persistence.Export)
	var ok bool
	err := s.N.Store.View(func(tx persistence.Tx) (err error) {
		ok, err = tx.Get(persistence.Exports, []byte(id), ex)
		return err
	})
	if !ok {
		ex = nil
	}
	return ex, err
}

// credential reads tenant t's credential of kind.
func (s *Exports) credential(t persistence.Tenant, id, kind string) (*persistence.Credential, error) {
	c, err := persistence.CredentialOf(s.N.Store, t, id, kind)
	if err == nil && c == nil {
		err = protocol.Refuse(protocol.CodeCredentialNotFound, "credential %s not found (hub tokens are registered with `wts credentials add`)", id)
	}
	return c, err
}

// AddCredential seals and stores a secret of tenant t (the admin path):
// a hub token, or a provider key (kind protocol.CredentialProvider) of
// provider.
func (s *Exports) AddCredential(t persistence.Tenant, kind, provider, name string, secret []byte) (*persistence.Credential, error) {
	return persistence.AddCredential(s.N.Store, s.Vault, t, kind, provider, name, secret, s.N.Now())
}

// Run publishes exports one at a time, oldest first, until stop closes. It
// keeps no queue of its own: each wake-up it takes every export still
// pending or uploading from the store, so nothing accepted is lost to a
// full channel or a restart (an upload a stop cut short is taken again;
// every step of the Hub protocol may be repeated).
func (s *Exports) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-stop; cancel() }()
	for {
		var todo []string
		err := s.N.Store.View(func(tx persistence.Tx) error {
			return persistence.Each(tx, persistence.Exports, nil, nil, func(_ []byte, ex *persistence.Export) (bool, error) {
				if ex.Status == states.ExportPending || ex.Status == states.ExportUploading {
					todo = append(todo, ex.ID)
				}
				return true, nil
			})
		})
		if err != nil {
			s.N.Log.Error("read exports", "err", err)
		}
		for _, id := range todo {
			if err := s.publish(ctx, id); err != nil && ctx.Err() == nil && !errors.Is(err, errClaimed) {
				s.N.Log.Error("export", "export", id, "err", err)
			}
		}
		select {
		case <-stop:
			return
		case <-s.wake:
		case <-time.After(exportClaim): // claims that lapsed: their exporters died
		}
	}
}

// setExport applies fn to an export's record.
func (s *Exports) setExport(id string, fn func(*persistence.Export) error) (*persistence.Export, error) {
	var out persistence.Export
	err := s.N.Store.Update(func(tx persistence.Tx) error {
		if _, err := tx.Get(persistence.Exports, []byte(id), &out); err != nil {
			return err
		}
		if err := fn(&out); err != nil {
			return err
		}
		out.UpdatedAt = s.N.Now()
		return tx.Put(persistence.Exports, []byte(id), &out)
	})
	return &out, err
}

// claimed applies fn to an export this exporter holds, or may take (its
// claim lapsed or let go), and renews the claim; errClaimed if another
// exporter holds it.
func (s *Exports) claimed(id string, fn func(*persistence.Export) error) (*persistence.Export, error) {
	return s.setExport(id, func(e *persistence.Export) error {
		now := s.N.Now()
		if e.Claim != s.self && now.Before(e.ClaimedUntil) {
			return errClaimed
		}
		e.Claim, e.ClaimedUntil = s.self, now.Add(exportClaim)
		return fn(e)
	})
}

// publish uploads one export's artifact and records how it ended. The
// exporter claims the export first and holds the claim while it uploads,
// so one node's exporter at a time works on it; one that takes over a
// lapsed claim starts again (every step of the Hub protocol may be
// repeated).
func (s *Exports) publish(ctx context.Context, id string) error {
	ex, err := s.claimed(id, func(e *persistence.Export) error {
		if e.Status == states.ExportUploading { // cut short by a stop or a crash: taken again
			return nil
		}
		return states.Move(states.ExportMoves, &e.Status, states.ExportUploading)
	})
	if err != nil {
		return err
	}
	hold, release := context.WithCancelCause(ctx)
	held := make(chan struct{})
	go func() { // renew the claim until the upload ends; losing it ends the upload
		defer close(held)
		for {
			select {
			case <-hold.Done():
				return
			case <-time.After(exportClaim / 3):
			}
			if _, err := s.claimed(id, func(*persistence.Export) error { return nil }); err != nil {
				release(err)
				return
			}
		}
	}()
	commit, err := s.upload(hold, ex)
	release(nil)
	<-held
	switch {
	case ctx.Err() != nil:
		// Stopping: left uploading, the claim let go so that another
		// exporter (or this node's, restarted) takes it at once.
		if _, rerr := s.claimed(id, func(e *persistence.Export) error { e.ClaimedUntil = time.Time{}; return nil }); rerr != nil {
			s.N.Log.Error("let go of an export", "export", id, "err", rerr)
		}
		return err
	case context.Cause(hold) != context.Canceled:
		return context.Cause(hold) // the claim was lost: its new holder finishes the export
	}
	_, err = s.claimed(id, func(e *persistence.Export) error {
		if err == nil {
			e.ResultArtifactID, e.CommitOID = e.ArtifactID, commit
			return states.Move(states.ExportMoves, &e.Status, states.ExportSucceeded)
		}
		e.ErrorCode, e.ErrorMessage = hub.CodeOf(err), err.Error()
		if e.ErrorCode == "" {
			e.ErrorCode = protocol.CodeInternal
		}
		return states.Move(states.ExportMoves, &e.Status, states.ExportFailed)
	})
	return err
}

// upload sends an export's artifact to the hub (repository, branch, files,
// commit) and returns the commit. The token is opened only here and goes
// only to the hub.
func (s *Exports) upload(ctx context.Context, ex *persistence.Export) (string, error) {
	a, err := Artifact(s.N.Store, ex.ArtifactID)
	if err == nil && (a == nil || a.Status != states.Available) {
		err = &hub.Error{Code: protocol.CodeArtifactRetired, Message: "the artifact was retired before it was published"}
	}
	if err != nil {
		return "", err
	}
	cred, err := s.credential(ex.Tenant, ex.CredentialID, protocol.CredentialHub)
	if err != nil {
		return "", &hub.Error{Code: protocol.CodeCredentialNotFound, Message: "the credential is gone"}
	}
	token, err := s.Vault.Open(cred)
	if err != nil {
		return "", err
	}
	c := &hub.Client{Endpoint: s.Endpoint, Token: string(token)}
	uctx, cancel := context.WithTimeout(ctx, defaultExportWait)
	defer cancel()
	var files []hub.File
	dir := s.N.Volume.ArtifactDir(a.RunID, a.ID)
	for _, f := range a.Files {
		files = append(files, hub.File{Path: f.Path, Local: filepath.Join(dir, f.Path), Size: f.SizeBytes, SHA256: f.SHA256})
	}
	err = c.CreateRepo(uctx, ex.Repo, ex.Private)
	if err == nil && ex.Revision != "main" {
		err = c.CreateBranch(uctx, ex.Repo, ex.Revision)
	}
	if err != nil {
		return "", err
	}
	return c.Upload(uctx, ex.Repo, ex.Revision, fmt.Sprintf("Upload LoRA adapter %s from wts run %s", a.ID, a.RunID), files)
}

// ownRun refuses a run that is not tenant t's.
func ownRun(st persistence.Store, t persistence.Tenant, id string) error {
	_, err := protocol.Owned(st, "run", id, t, persistence.GetRun, func(r *persistence.Run) persistence.Tenant { return r.Tenant })
	return err
}
