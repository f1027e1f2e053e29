// Package artifacts holds what runs leave behind: their checkpoints and
// exported artifacts (recorded with the operation that made them, checked
// before a run loads or starts from one, retired with their run), the
// merged-weights downloads built from an artifact on the trainer's
// executor, and exports that publish an artifact to a model hub.
package artifacts

import (
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// RecordOutputs writes the checkpoint or artifact a succeeded operation
// made, in the transaction that records its outcome.
func RecordOutputs(tx persistence.Tx, r *persistence.Run, op *persistence.Operation, d *executor.Done) error {
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

// CheckpointIn reads a checkpoint, whoever owns it.
func CheckpointIn(tx persistence.Tx, id string) (*persistence.Checkpoint, error) {
	cp := new(persistence.Checkpoint)
	ok, err := byIndex(tx, persistence.Checkpoints, id, cp)
	if err == nil && !ok {
		err = protocol.Refuse(protocol.CodeCheckpointNotFound, "checkpoint %s not found", id)
	}
	return cp, err
}

// Checkpoint reads a checkpoint whoever owns it (the executor's lookup).
func Checkpoint(st persistence.Store, id string) (cp *persistence.Checkpoint, err error) {
	err = st.View(func(tx persistence.Tx) error {
		cp, err = CheckpointIn(tx, id)
		return err
	})
	return cp, err
}

// GetCheckpoint reads a checkpoint of tenant t.
func GetCheckpoint(st persistence.Store, t persistence.Tenant, id string) (*persistence.Checkpoint, error) {
	cp, err := Checkpoint(st, id)
	if err == nil && cp.Tenant != t {
		err = protocol.Refuse(protocol.CodeCheckpointNotFound, "checkpoint %s not found", id)
	}
	return cp, err
}

// Artifact reads an artifact, whoever owns it (nil if there is none).
func Artifact(st persistence.Store, id string) (*persistence.Artifact, error) {
	a := new(persistence.Artifact)
	var ok bool
	err := st.View(func(tx persistence.Tx) (err error) {
		ok, err = byIndex(tx, persistence.Artifacts, id, a)
		return err
	})
	if !ok {
		a = nil
	}
	return a, err
}

// GetArtifact reads an artifact of tenant t.
func GetArtifact(st persistence.Store, t persistence.Tenant, id string) (*persistence.Artifact, error) {
	a, err := Artifact(st, id)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Tenant != t {
		return nil, protocol.NotFound("artifact", id)
	}
	return a, nil
}

// Available refuses a retired checkpoint, whose files are gone.
func Available(cp *persistence.Checkpoint) error {
	if cp.Status != states.Available {
		return protocol.Refuse(protocol.CodeCheckpointRetired, "checkpoint %s was retired with its run %s", cp.ID, cp.RunID)
	}
	return nil
}

// Usable checks that checkpoint cp can seed or be loaded into a run of
// tenant t on model and revision with adapter l: same organization (and key
// kind), not retired, same base model and revision, same adapter shape.
func Usable(cp *persistence.Checkpoint, t persistence.Tenant, model, revision string, l persistence.LoRA) error {
	if cp.Tenant != t {
		return protocol.Refuse(protocol.CodeCheckpointNotFound, "checkpoint %s not found", cp.ID)
	}
	if err := Available(cp); err != nil {
		return err
	}
	if cp.BaseModel != model || cp.ModelRevision != revision {
		return protocol.Refuse(protocol.CodeCheckpointIncompatible, "checkpoint %s is of %s@%s, not %s@%s", cp.ID, cp.BaseModel, cp.ModelRevision, model, revision)
	}
	if a := cp.LoRA; a.Rank != l.Rank || a.TrainAttn != l.TrainAttn || a.TrainMLP != l.TrainMLP || a.TrainUnembed != l.TrainUnembed {
		return protocol.Refuse(protocol.CodeCheckpointIncompatible, "checkpoint %s holds a rank-%d adapter on attn=%t mlp=%t unembed=%t; the run's lora differs",
			cp.ID, a.Rank, a.TrainAttn, a.TrainMLP, a.TrainUnembed)
	}
	return nil
}

// Retire marks a run's checkpoints and artifacts retired, inside the write
// that marks the run retired (its grain removes their files after).
func Retire(tx persistence.Tx, runID string) error {
	err := retire(tx, persistence.Checkpoints, runID, func(c *persistence.Checkpoint) *persistence.Output { return &c.Output })
	if err != nil {
		return err
	}
	return retire(tx, persistence.Artifacts, runID, func(a *persistence.Artifact) *persistence.Output { return &a.Output })
}

// retire marks a run's records in bucket b retired; output is the
// record's Output.
func retire[T any](tx persistence.Tx, b persistence.Bucket, runID string, output func(*T) *persistence.Output) error {
	var keys [][]byte
	var recs []*T
	err := persistence.Each(tx, b, []byte(runID), nil, func(k []byte, rec *T) (bool, error) {
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
