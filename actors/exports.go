package actors

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers/hub"
)

// ExportPrefix starts every export id.
const ExportPrefix = "wte_"

// Export codes.
const (
	CodeNotEligible   = "export_not_eligible"
	CodeTokenRefused  = "token_not_accepted"
	CredentialHub     = "hub_token" // the kind of credential a hub export uses
	DestinationHub    = "model_hub"
	ExportModeLoRA    = "lora"
	defaultExportWait = 10 * time.Minute // one export's bound, all files included
)

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
}

// ExportReply is an export as the API shows it: with the published artifact
// once the export has succeeded, without it before.
type ExportReply struct {
	Export   *persistence.Export   `json:"export"`
	Artifact *persistence.Artifact `json:"artifact,omitempty"`
	Mode     string                `json:"mode"`
}

// CreateExport accepts the publication of a run's LoRA artifact to a hub
// repository with one of the caller's registered hub credentials; a repeat
// of its request_id returns the first export.
func (s *System) CreateExport(req NewExport) (*ExportReply, bool, error) {
	if _, err := s.GetRun(req.Tenant, req.RunID); err != nil {
		return nil, false, err
	}
	a, err := s.GetArtifact(req.Tenant, req.ArtifactID)
	if err != nil {
		return nil, false, err
	}
	switch {
	case a.RunID != req.RunID:
		return nil, false, refuse(CodeNotEligible, "artifact %s belongs to run %s, not %s", a.ID, a.RunID, req.RunID)
	case a.Kind != executor.ArtifactLoRA:
		return nil, false, refuse(CodeNotEligible, "artifact %s is a %s; only LoRA adapters can be published to a hub", a.ID, a.Kind)
	case a.Status != states.Available:
		return nil, false, refuse(CodeArtifactRetired, "artifact %s was retired with its run", a.ID)
	}
	if _, err := s.credential(req.Tenant, req.CredentialID, CredentialHub); err != nil {
		return nil, false, err
	}
	now := s.now()
	fresh := &persistence.Export{ID: NewID(ExportPrefix), Tenant: req.Tenant, RequestID: req.RequestID, RunID: req.RunID,
		ArtifactID: a.ID, Status: states.ExportPending, Repo: req.Repo, Revision: req.Revision, Private: req.Private,
		CredentialID: req.CredentialID, CreatedAt: now, UpdatedAt: now}
	key := requestKey(req.Tenant, "export\x00"+req.RunID, req.RequestID)
	var ex *persistence.Export
	var created bool
	err = s.store.Update(func(tx persistence.Tx) (err error) {
		ex, created, err = once(tx, key, persistence.Exports, fresh.ID, fresh, nil)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("create export: %w", err)
	}
	if created {
		select {
		case s.exportWake <- struct{}{}:
		default: // already woken: it will find this one too
		}
	}
	reply, err := s.exportReply(ex)
	return reply, created, err
}

// GetExport reads an export of tenant t.
func (s *System) GetExport(t persistence.Tenant, id string) (*ExportReply, error) {
	ex, err := s.export(id)
	if err != nil {
		return nil, err
	}
	if ex == nil || ex.Tenant != t {
		return nil, notFound("export", id)
	}
	return s.exportReply(ex)
}

func (s *System) exportReply(ex *persistence.Export) (*ExportReply, error) {
	r := &ExportReply{Export: ex, Mode: ExportModeLoRA}
	if ex.Status == states.ExportSucceeded {
		a, err := s.artifact(ex.ResultArtifactID)
		if err != nil {
			return nil, err
		}
		r.Artifact = a
	}
	return r, nil
}

func (s *System) export(id string) (*persistence.Export, error) {
	ex := new(persistence.Export)
	var ok bool
	err := s.store.View(func(tx persistence.Tx) (err error) {
		ok, err = tx.Get(persistence.Exports, []byte(id), ex)
		return err
	})
	if !ok {
		ex = nil
	}
	return ex, err
}

// credential reads tenant t's credential of kind.
func (s *System) credential(t persistence.Tenant, id, kind string) (*persistence.Credential, error) {
	c := new(persistence.Credential)
	var ok bool
	err := s.store.View(func(tx persistence.Tx) (err error) {
		ok, err = tx.Get(persistence.Credentials, []byte(id), c)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok || c.Tenant != t || c.Kind != kind {
		return nil, refuse(CodeCredentialNotFound, "credential %s not found (hub tokens are registered with `wts credentials add`)", id)
	}
	return c, nil
}

// AddCredential seals and stores a secret of tenant t (the admin path).
func (s *System) AddCredential(t persistence.Tenant, kind, name string, secret []byte) (*persistence.Credential, error) {
	return persistence.AddCredential(s.store, s.vault, t, kind, name, secret, s.now())
}

// exporter publishes exports one at a time, oldest first. It keeps no
// queue of its own: each wake-up it takes every export still pending or
// uploading from the store, so nothing accepted is lost to a full channel or
// a restart (an upload a stop cut short is taken again; every step of the
// Hub protocol may be repeated).
func (s *System) exporter() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.stop; cancel() }()
	for {
		var todo []string
		err := s.store.View(func(tx persistence.Tx) error {
			return tx.Scan(persistence.Exports, nil, nil, func(_, raw []byte) (bool, error) {
				var ex persistence.Export
				if err := persistence.Decode(raw, &ex); err != nil {
					return false, err
				}
				if ex.Status == states.ExportPending || ex.Status == states.ExportUploading {
					todo = append(todo, ex.ID)
				}
				return true, nil
			})
		})
		if err != nil {
			s.log.Error("read exports", "err", err)
		}
		for _, id := range todo {
			if err := s.publish(ctx, id); err != nil && ctx.Err() == nil {
				s.log.Error("export", "export", id, "err", err)
			}
		}
		select {
		case <-s.stop:
			return
		case <-s.exportWake:
		}
	}
}

// setExport applies fn to an export's record.
func (s *System) setExport(id string, fn func(*persistence.Export) error) (*persistence.Export, error) {
	var out persistence.Export
	err := s.store.Update(func(tx persistence.Tx) error {
		if _, err := tx.Get(persistence.Exports, []byte(id), &out); err != nil {
			return err
		}
		if err := fn(&out); err != nil {
			return err
		}
		out.UpdatedAt = s.now()
		return tx.Put(persistence.Exports, []byte(id), &out)
	})
	return &out, err
}

// publish uploads one export's artifact: repository, branch, files, commit.
// The token is opened only here and goes only to the Hub.
func (s *System) publish(ctx context.Context, id string) error {
	ex, err := s.setExport(id, func(e *persistence.Export) error {
		if e.Status == states.ExportUploading { // cut short by a stop: taken again
			return nil
		}
		return states.Move(states.ExportMoves, &e.Status, states.ExportUploading)
	})
	if err != nil {
		return err
	}
	var commit string
	end := func(err error) error {
		if ctx.Err() != nil {
			return err // stopping: left uploading, taken again at the next start
		}
		_, serr := s.setExport(id, func(e *persistence.Export) error {
			if err == nil {
				e.ResultArtifactID, e.CommitOID = e.ArtifactID, commit
				return states.Move(states.ExportMoves, &e.Status, states.ExportSucceeded)
			}
			e.ErrorCode, e.ErrorMessage = hub.CodeOf(err), err.Error()
			if e.ErrorCode == "" {
				e.ErrorCode = CodeInternal
			}
			return states.Move(states.ExportMoves, &e.Status, states.ExportFailed)
		})
		return serr
	}
	a, err := s.artifact(ex.ArtifactID)
	if err == nil && (a == nil || a.Status != states.Available) {
		err = &hub.Error{Code: CodeArtifactRetired, Message: "the artifact was retired before it was published"}
	}
	if err != nil {
		return end(err)
	}
	cred, err := s.credential(ex.Tenant, ex.CredentialID, CredentialHub)
	if err != nil {
		return end(&hub.Error{Code: CodeCredentialNotFound, Message: "the credential is gone"})
	}
	token, err := s.vault.Open(cred)
	if err != nil {
		return end(err)
	}
	c := &hub.Client{Endpoint: s.cfg.HubEndpoint, Token: string(token)}
	uctx, cancel := context.WithTimeout(ctx, defaultExportWait)
	defer cancel()
	var files []hub.File
	dir := s.volume.ArtifactDir(a.RunID, a.ID)
	for _, f := range a.Files {
		files = append(files, hub.File{Path: f.Path, Local: filepath.Join(dir, f.Path), Size: f.SizeBytes, SHA256: f.SHA256})
	}
	err = c.CreateRepo(uctx, ex.Repo, ex.Private)
	if err == nil && ex.Revision != "main" {
		err = c.CreateBranch(uctx, ex.Repo, ex.Revision)
	}
	if err == nil {
		commit, err = c.Upload(uctx, ex.Repo, ex.Revision, fmt.Sprintf("Upload LoRA adapter %s from wts run %s", a.ID, a.RunID), files)
	}
	return end(err)
}
