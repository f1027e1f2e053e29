package artifacts

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

func code(err error) string {
	if err == nil {
		return ""
	}
	return protocol.AsError(err).Code
}

// A succeeded operation's checkpoint and artifact are recorded with their
// provenance and found by id; retiring their run retires both (again:
// harmlessly), and a retired checkpoint can no longer seed or load a run.
func TestOutputsRecordedAndRetired(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tenant := persistence.Tenant{Org: "acme"}
	lora := persistence.LoRA{Rank: 4, TrainAttn: true}
	r := &persistence.Run{ID: "wtr_1", SessionID: "wts_1", Tenant: tenant, BaseModel: "tiny", ModelRevision: "rev1", LoRA: lora}
	made := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	save := &persistence.Operation{SeqID: 3, UpdatedAt: made}
	export := &persistence.Operation{SeqID: 4, UpdatedAt: made}
	err = st.Update(func(tx persistence.Tx) error {
		if err := RecordOutputs(tx, r, save, &executor.Done{Checkpoint: &persistence.Checkpoint{Output: persistence.Output{ID: "ckpt_1"}}}); err != nil {
			return err
		}
		return RecordOutputs(tx, r, export, &executor.Done{Artifact: &persistence.Artifact{Output: persistence.Output{ID: "wta_1"}, Kind: executor.ArtifactLoRA}})
	})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := GetCheckpoint(st, tenant, "ckpt_1")
	if err != nil || cp.RunID != r.ID || cp.SeqID != 3 || cp.Status != states.Available || cp.BaseModel != "tiny" || cp.LoRA != lora || !cp.CreatedAt.Equal(made) {
		t.Fatalf("checkpoint %+v %v", cp, err)
	}
	if _, err := GetCheckpoint(st, persistence.Tenant{Org: "other"}, "ckpt_1"); code(err) != protocol.CodeCheckpointNotFound {
		t.Fatalf("another organization's checkpoint: %v", err)
	}
	if a, err := GetArtifact(st, tenant, "wta_1"); err != nil || a.SeqID != 4 {
		t.Fatalf("artifact %+v %v", a, err)
	}

	for _, c := range []struct {
		name       string
		t          persistence.Tenant
		model, rev string
		l          persistence.LoRA
		code       string
	}{
		{"same run shape", tenant, "tiny", "rev1", lora, ""},
		{"another organization", persistence.Tenant{Org: "other"}, "tiny", "rev1", lora, protocol.CodeCheckpointNotFound},
		{"another revision", tenant, "tiny", "rev2", lora, protocol.CodeCheckpointIncompatible},
		{"another rank", tenant, "tiny", "rev1", persistence.LoRA{Rank: 8, TrainAttn: true}, protocol.CodeCheckpointIncompatible},
		{"other modules", tenant, "tiny", "rev1", persistence.LoRA{Rank: 4, TrainMLP: true}, protocol.CodeCheckpointIncompatible},
	} {
		if got := code(Usable(cp, c.t, c.model, c.rev, c.l)); got != c.code {
			t.Errorf("%s: %q, want %q", c.name, got, c.code)
		}
	}

	for range 2 {
		if err := st.Update(func(tx persistence.Tx) error { return Retire(tx, r.ID) }); err != nil {
			t.Fatal(err)
		}
	}
	cp, _ = Checkpoint(st, "ckpt_1")
	a, _ := Artifact(st, "wta_1")
	if cp.Status != states.Retired || a.Status != states.Retired {
		t.Fatalf("after retire: checkpoint %s, artifact %s", cp.Status, a.Status)
	}
	if got := code(Usable(cp, tenant, "tiny", "rev1", lora)); got != protocol.CodeCheckpointRetired {
		t.Fatalf("a retired checkpoint: %q", got)
	}
}
