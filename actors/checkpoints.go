package actors

import (
	"fmt"
	"os"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// recordOutputs writes the checkpoint or artifact a succeeded operation
// made, in the transaction that records its outcome.
func recordOutputs(tx persistence.Tx, r *persistence.Run, op *persistence.Operation, d *executor.Done) error {
	key := persistence.SeqKey(r.ID, op.SeqID)
	switch {
	case d.Checkpoint != nil:
		cp := *d.Checkpoint
		cp.Output = made(cp.ID, r, op)
		cp.BaseModel, cp.ModelRevision, cp.LoRA = r.BaseModel, r.ModelRevision, r.LoRA
		if err := tx.Put(persistence.Checkpoints, key, &cp); err != nil {
			return err
		}
		return tx.Put(persistence.Index, []byte(cp.ID), key)
	case d.Artifact != nil:
		a := *d.Artifact
		a.Output = made(a.ID, r, op)
		if err := tx.Put(persistence.Artifacts, key, &a); err != nil {
			return err
		}
		return tx.Put(persistence.Index, []byte(a.ID), key)
	}
	return nil
}

// made is the provenance of output id, made by operation op of run r.
func made(id string, r *persistence.Run, op *persistence.Operation) persistence.Output {
	return persistence.Output{ID: id, Tenant: r.Tenant, SessionID: r.SessionID, RunID: r.ID, SeqID: op.SeqID,
		Status: states.Available, CreatedAt: op.UpdatedAt}
}

// byIndex reads into v the record that id indexes in bucket b.
func byIndex(tx persistence.Tx, b persistence.Bucket, id string, v any) (bool, error) {
	var key []byte
	if ok, err := tx.Get(persistence.Index, []byte(id), &key); err != nil || !ok {
		return false, err
	}
	return tx.Get(b, key, v)
}

// checkpointIn reads a checkpoint, whoever owns it.
func checkpointIn(tx persistence.Tx, id string) (*persistence.Checkpoint, error) {
	cp := new(persistence.Checkpoint)
	ok, err := byIndex(tx, persistence.Checkpoints, id, cp)
	if err == nil && !ok {
		err = refuse(CodeCheckpointNotFound, "checkpoint %s not found", id)
	}
	return cp, err
}

// checkpoint reads a checkpoint whoever owns it (the executor's lookup).
func (s *System) checkpoint(id string) (cp *persistence.Checkpoint, err error) {
	err = s.store.View(func(tx persistence.Tx) error {
		cp, err = checkpointIn(tx, id)
		return err
	})
	return cp, err
}

// GetCheckpoint reads a checkpoint of tenant t.
func (s *System) GetCheckpoint(t persistence.Tenant, id string) (*persistence.Checkpoint, error) {
	cp, err := s.checkpoint(id)
	if err == nil && cp.Tenant != t {
		err = refuse(CodeCheckpointNotFound, "checkpoint %s not found", id)
	}
	return cp, err
}

// artifact reads an artifact, whoever owns it (nil if there is none).
func (s *System) artifact(id string) (*persistence.Artifact, error) {
	a := new(persistence.Artifact)
	var ok bool
	err := s.store.View(func(tx persistence.Tx) (err error) {
		ok, err = byIndex(tx, persistence.Artifacts, id, a)
		return err
	})
	if !ok {
		a = nil
	}
	return a, err
}

// GetArtifact reads an artifact of tenant t.
func (s *System) GetArtifact(t persistence.Tenant, id string) (*persistence.Artifact, error) {
	a, err := s.artifact(id)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Tenant != t {
		return nil, notFound("artifact", id)
	}
	return a, nil
}

// ListCheckpoints pages a run's checkpoints in the order they were saved.
func (s *System) ListCheckpoints(t persistence.Tenant, runID string, after int64, limit int) (*Page[persistence.Checkpoint], error) {
	return page(s, t, persistence.Checkpoints, runID, after, limit, func(c *persistence.Checkpoint) int64 { return c.SeqID })
}

// ListArtifacts pages a run's artifacts in the order they were exported.
func (s *System) ListArtifacts(t persistence.Tenant, runID string, after int64, limit int) (*Page[persistence.Artifact], error) {
	return page(s, t, persistence.Artifacts, runID, after, limit, func(a *persistence.Artifact) int64 { return a.SeqID })
}

// available refuses a retired checkpoint, whose files are gone.
func available(cp *persistence.Checkpoint) error {
	if cp.Status != states.Available {
		return refuse(CodeCheckpointRetired, "checkpoint %s was retired with its run %s", cp.ID, cp.RunID)
	}
	return nil
}

// usable checks that checkpoint cp can seed or be loaded into a run of
// tenant t on model and revision with adapter l: same organization (and key
// kind), not retired, same base model and revision, same adapter shape.
func usable(cp *persistence.Checkpoint, t persistence.Tenant, model, revision string, l persistence.LoRA) error {
	if cp.Tenant != t {
		return refuse(CodeCheckpointNotFound, "checkpoint %s not found", cp.ID)
	}
	if err := available(cp); err != nil {
		return err
	}
	if cp.BaseModel != model || cp.ModelRevision != revision {
		return refuse(CodeCheckpointIncompatible, "checkpoint %s is of %s@%s, not %s@%s", cp.ID, cp.BaseModel, cp.ModelRevision, model, revision)
	}
	if a := cp.LoRA; a.Rank != l.Rank || a.TrainAttn != l.TrainAttn || a.TrainMLP != l.TrainMLP || a.TrainUnembed != l.TrainUnembed {
		return refuse(CodeCheckpointIncompatible, "checkpoint %s holds a rank-%d adapter on attn=%t mlp=%t unembed=%t; the run's lora differs",
			cp.ID, a.Rank, a.TrainAttn, a.TrainMLP, a.TrainUnembed)
	}
	return nil
}

// RetireReply is retire's answer.
type RetireReply struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Retired bool   `json:"retired"`
}

// Retire removes a terminal run's artifact prefix: its checkpoints and
// artifacts become retired and their files are deleted, and its sampler is
// retired. Its training volume
// (snapshots, the state it started from) is never touched. Retiring again
// is harmless, and finishes a removal a crash cut short.
func (s *System) Retire(t persistence.Tenant, runID, requestID string) (*RetireReply, error) {
	return s.run(runID).retire(Control{t, requestID})
}

func (g *runGrain) retire(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[Control](in)
	if err != nil {
		return nil, err
	}
	if req.Tenant != g.run.Tenant {
		return nil, notFound("run", g.ID)
	}
	if !states.Terminal(states.RunMoves, g.run.Status) {
		return nil, refuse(CodeRunNotTerminal, "run %s is %s; only a run that has ended can be retired", g.ID, g.run.Status)
	}
	err = g.write(func(tx persistence.Tx, r *persistence.Run) error {
		r.Retired = true
		err := retireOutputs(tx, persistence.Checkpoints, r.ID, func(c *persistence.Checkpoint) *persistence.Output { return &c.Output })
		if err != nil {
			return err
		}
		return retireOutputs(tx, persistence.Artifacts, r.ID, func(a *persistence.Artifact) *persistence.Output { return &a.Output })
	})
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(g.sys.volume.ArtifactPrefix(g.ID)); err != nil {
		return nil, fmt.Errorf("remove the artifact prefix of %s: %w", g.ID, err)
	}
	if g.run.SamplerID != "" {
		if err := g.sys.sampler(g.run.SamplerID).retire(); err != nil {
			return nil, fmt.Errorf("retire sampler %s: %w", g.run.SamplerID, err)
		}
	}
	return &RetireReply{ID: g.ID, Status: g.run.Status, Retired: true}, nil
}

// retireOutputs marks a run's records in bucket b retired; output is the
// record's Output.
func retireOutputs[T any](tx persistence.Tx, b persistence.Bucket, runID string, output func(*T) *persistence.Output) error {
	var keys [][]byte
	var recs []*T
	err := tx.Scan(b, []byte(runID), nil, func(k, raw []byte) (bool, error) {
		rec := new(T)
		if err := persistence.Decode(raw, rec); err != nil {
			return false, err
		}
		if o := output(rec); o.Status == states.Available {
			if err := states.Move(states.OutputMoves, &o.Status, states.Retired); err != nil {
				return false, err
			}
			keys, recs = append(keys, append([]byte(nil), k...)), append(recs, rec)
		}
		return true, nil
	})
	for i := range keys {
		if err == nil {
			err = tx.Put(b, keys[i], recs[i])
		}
	}
	return err
}
