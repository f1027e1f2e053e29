package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wts-project/wts/actors/payload"
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
func (e *Trainer) saveState(_ context.Context, ts *trainerState, j *Job, opID string, pp payload.Parsed) (*applied, error) {
	p, runID, id := pp.(*payload.Save), j.RunID, checkpointID(opID)
	dir := e.sys.env.Volume.CheckpointDir(runID, id)
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
func (e *Trainer) loadState(_ context.Context, ts *trainerState, _ *Job, _ string, pp payload.Parsed) (*applied, error) {
	p := pp.(*payload.Load)
	cp, err := e.sys.env.Checkpoint(p.CheckpointID)
	if err != nil {
		return nil, err
	}
	dir := e.sys.env.Volume.CheckpointDir(cp.RunID, cp.ID)
	var tr train.Learner
	if p.WithOptimizer {
		tr, err = ts.engine.LoadLearner(dir)
	} else {
		var ad *lora.Adapter[float32]
		if ad, err = lora.LoadPEFT(dir, ts.engine.Config()); err == nil {
			tr = ts.engine.NewLearner(ad)
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
func (e *Trainer) exportLoRA(_ context.Context, ts *trainerState, j *Job, opID string, pp payload.Parsed) (*applied, error) {
	p, runID, id := pp.(*payload.Export), j.RunID, artifactID(opID)
	dir := e.sys.env.Volume.ArtifactDir(runID, id)
	ad, step := ts.tr.Adapter(), int64(ts.tr.Steps())
	if p.CheckpointID != "" {
		cp, err := e.sys.env.Checkpoint(p.CheckpointID)
		if err != nil {
			return nil, err
		}
		if ad, err = lora.LoadPEFT(e.sys.env.Volume.CheckpointDir(cp.RunID, cp.ID), ts.engine.Config()); err != nil {
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

// checkpointID is the id of the checkpoint that the save_state operation
// opID makes, and artifactID the id of the artifact an export_lora makes:
// derived from the operation's id, so that an operation that runs again
// (after an interrupted attempt left its files) rewrites the same folder.
func checkpointID(opID string) string {
	return payload.CheckpointPrefix + opID[strings.IndexByte(opID, '_')+1:]
}

// artifactID lays the operation id's 32 hex digits out as a UUID (version 8,
// the custom layout of RFC 9562).
func artifactID(opID string) string {
	h := []byte(opID[strings.IndexByte(opID, '_')+1:])
	h[12] = '8'
	h[16] = "89ab"[strings.IndexByte("0123456789abcdef", h[16])%4]
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}
