package actors

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/persistence"
)

// Artifact kinds and export modes.
const (
	ArtifactLoRA = "lora_adapter" // a PEFT adapter folder
	ExportPEFT   = "peft"
)

// checkpointResult is the result of save_state.
type checkpointResult struct {
	CheckpointID string `json:"checkpoint_id"`
	Step         int64  `json:"step"`
	SizeBytes    int64  `json:"size_bytes"`
}

// loadResult is the result of load_state.
type loadResult struct {
	CheckpointID  string `json:"checkpoint_id"`
	WithOptimizer bool   `json:"with_optimizer"`
	Step          int64  `json:"step"`
}

// exportResult is the result of export_lora.
type exportResult struct {
	ArtifactID string `json:"artifact_id"`
	Checksum   string `json:"checksum"`
	SizeBytes  int64  `json:"size_bytes"`
}

// saveState writes the run's trainer to a new checkpoint folder; the grain
// records the checkpoint with the operation's outcome.
func (e *executor) saveState(_ context.Context, ts *trainerState, j *job, opID string, pp payload.Parsed) (*applied, error) {
	p, runID, id := pp.(*payload.Save), j.RunID, checkpointID(opID)
	dir := e.sys.volume.CheckpointDir(runID, id)
	if err := persistence.WriteDir(dir, func(tmp string) error { return ts.tr.SaveState(tmp, ts.baseModel) }); err != nil {
		return nil, fmt.Errorf("write checkpoint: %w", err)
	}
	_, _, size, err := persistence.Manifest(dir)
	if err != nil {
		return nil, err
	}
	cp := &persistence.Checkpoint{Output: persistence.Output{ID: id}, Name: p.Name, Step: int64(ts.tr.Steps()), SizeBytes: size}
	return &applied{result: checkpointResult{id, cp.Step, size}, checkpoint: cp}, nil
}

// loadState replaces the run's trainer with a checkpoint's weights, and its
// optimizer state when asked (otherwise AdamW starts afresh).
func (e *executor) loadState(_ context.Context, ts *trainerState, _ *job, _ string, pp payload.Parsed) (*applied, error) {
	p := pp.(*payload.Load)
	cp, err := e.sys.checkpoint(p.CheckpointID)
	if err != nil {
		return nil, err
	}
	dir, m := e.sys.volume.CheckpointDir(cp.RunID, cp.ID), ts.tr.Model()
	var tr *train.Trainer
	if p.WithOptimizer {
		tr, err = train.LoadState(dir, m)
	} else {
		var ad *lora.Adapter[float32]
		if ad, err = lora.LoadPEFT(dir, m.Cfg()); err == nil {
			tr = train.NewTrainer(m, ad)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", cp.ID, err)
	}
	ts.tr = tr
	return &applied{result: loadResult{cp.ID, p.WithOptimizer, int64(tr.Steps())}}, nil
}

// exportLoRA writes a PEFT adapter folder (the run's current weights, or a
// checkpoint's) with a model card, and describes it as an artifact.
func (e *executor) exportLoRA(_ context.Context, ts *trainerState, j *job, opID string, pp payload.Parsed) (*applied, error) {
	p, runID, id := pp.(*payload.Export), j.RunID, artifactID(opID)
	dir := e.sys.volume.ArtifactDir(runID, id)
	ad, step := ts.tr.Adapter(), int64(ts.tr.Steps())
	if p.CheckpointID != "" {
		cp, err := e.sys.checkpoint(p.CheckpointID)
		if err != nil {
			return nil, err
		}
		if ad, err = lora.LoadPEFT(e.sys.volume.CheckpointDir(cp.RunID, cp.ID), ts.tr.Model().Cfg()); err != nil {
			return nil, fmt.Errorf("read checkpoint %s: %w", cp.ID, err)
		}
		step = cp.Step
	}
	err := persistence.WriteDir(dir, func(tmp string) error {
		if err := lora.SavePEFT(tmp, ad, ts.baseModel); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tmp, "README.md"), modelCard(ts.baseModel, runID, step, ad), 0o600)
	})
	if err != nil {
		return nil, fmt.Errorf("write artifact: %w", err)
	}
	files, sum, size, err := persistence.Manifest(dir)
	if err != nil {
		return nil, err
	}
	art := &persistence.Artifact{Output: persistence.Output{ID: id}, CheckpointID: p.CheckpointID, Kind: ArtifactLoRA, Checksum: sum,
		SizeBytes: size, ExportMode: ExportPEFT, Files: files}
	return &applied{result: exportResult{id, sum, size}, artifact: art}, nil
}

// modelCard is the README.md of an exported adapter: the Hub's model card,
// whose metadata block names the base model and the library that loads it.
func modelCard(baseModel, runID string, step int64, ad *lora.Adapter[float32]) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "---\nbase_model: %s\nlibrary_name: peft\ntags:\n- lora\n- wts\n---\n\n", baseModel)
	fmt.Fprintf(&b, "# LoRA adapter for %s\n\n", baseModel)
	fmt.Fprintf(&b, "Trained with wts (run `%s`, %d optimizer steps).\n\n", runID, step)
	fmt.Fprintf(&b, "- rank: %d\n- lora_alpha: %g\n- target modules: %s\n\n", ad.Cfg.Rank, ad.Cfg.Alpha, strings.Join(ad.Cfg.TargetNames(), ", "))
	b.WriteString("Load it with PEFT:\n\n```python\nfrom peft import PeftModel\nmodel = PeftModel.from_pretrained(base, \"path/to/this/folder\")\n```\n")
	return []byte(b.String())
}

// recordOutputs writes the checkpoint or artifact a succeeded operation
// made, in the transaction that records its outcome.
func recordOutputs(tx persistence.Tx, r *persistence.Run, op *persistence.Operation, d *done) error {
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
