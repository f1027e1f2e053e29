// Package nodetest starts nodes for the tests of the packages under
// actors/: each test starts what it needs (a node on a generated tiny
// model, in its own folder, quiet) and drives its grains through the node's
// front door, as a caller would.
package nodetest

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// Tenant is the tests' caller.
var Tenant = persistence.Tenant{Org: "acme"}

// Registry is the providers' registry over a generated tiny model.
func Registry(t testing.TB) *providers.Registry {
	return RegistryOf(t, "tiny", nil)
}

// RegistryOf is the registry over a model generated from preset and
// catalogued as "tiny", with the providers offering what offers says
// (providers.NewRegistry).
func RegistryOf(t testing.TB, preset string, offers map[string][]string) *providers.Registry {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate(preset, 3, dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	c, err := providers.NewCatalog(map[string]string{"tiny": dir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := providers.NewRegistry(c, offers)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Start starts a node on reg with its data in data.
func Start(t testing.TB, reg *providers.Registry, data string) *actors.System {
	t.Helper()
	return StartWith(t, actors.Config{DataDir: data, Registry: reg})
}

// StartWith starts a node with cfg, quiet; with WTS_WIRE=1 in the
// environment every message between its actors is msgpack-encoded, as
// between nodes (actors.Config.Wire).
func StartWith(t testing.TB, cfg actors.Config) *actors.System {
	t.Helper()
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Wire = os.Getenv("WTS_WIRE") == "1"
	s, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Credit grants Tenant enough credit that its sessions, each reserving up
// to 100 USD, never meet the credit floor.
func Credit(t testing.TB, s *actors.System) {
	t.Helper()
	err := s.Store().Update(func(tx persistence.Tx) error {
		_, err := ledger.Credit(tx, Tenant, 1e12, "tests", time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// StartClocked starts a node whose clock runs offset ahead of time.Now.
func StartClocked(t testing.TB, offset *atomic.Int64) (*actors.System, func() time.Time) {
	t.Helper()
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	return StartWith(t, actors.Config{DataDir: t.TempDir(), Registry: Registry(t), Now: clock}), clock
}

// Batch is a forward_backward payload of one 11-token sequence, varied by
// seed.
func Batch(seed int) json.RawMessage {
	toks := make([]int, 12)
	for i := range toks {
		toks[i] = (seed*7 + i*5) % 64
	}
	return json.RawMessage(fmt.Sprintf(`{"data":[{"model_input":{"token_ids":%s},"loss_fn_inputs":{"target_tokens":%s}}],"loss_fn":"cross_entropy"}`,
		mustJSON(toks[:11]), mustJSON(toks[1:])))
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Wait polls operation id until it ends.
func Wait(t testing.TB, s *actors.System, id string) *persistence.Operation {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // a long sample under -race on a loaded machine takes over 30 s
	for time.Now().Before(deadline) {
		op, err := s.GetOperation(Tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		if states.Terminal(states.OpMoves, op.Status) {
			return op
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("operation %s did not end", id)
	return nil
}

// Submit submits operation seq of run (idempotency key "k<seq>") and waits
// for it to end.
func Submit(t testing.TB, s *actors.System, run string, seq int64, kind string, p json.RawMessage) *persistence.Operation {
	t.Helper()
	acc, err := s.Submit(protocol.Submission{Tenant: Tenant, Target: run, SeqID: seq, IdempotencyKey: fmt.Sprint("k", seq), RequestHash: fmt.Sprint("h", seq), Kind: kind, Payload: p})
	if err != nil {
		t.Fatalf("submit %s seq %d: %v", kind, seq, err)
	}
	return Wait(t, s, acc.Op.ID)
}

// NewRun creates a session (request "s1") and its run (a rank-4 adapter on
// the tiny model).
func NewRun(t testing.TB, s *actors.System) (*protocol.Session, *persistence.Run) {
	t.Helper()
	return NamedRun(t, s, "1", "", 1)
}

// NamedRun is NewRun with requests "s"+name and "r"+name, the session's
// provider ("": auto) and the adapter's seed.
func NamedRun(t testing.TB, s *actors.System, name, provider string, seed uint64) (*protocol.Session, *persistence.Run) {
	t.Helper()
	ss, created, err := s.CreateSession(protocol.NewSession{Tenant: Tenant, RequestID: "s" + name, Provider: provider})
	if err != nil || !created {
		t.Fatal(err, created)
	}
	m, _ := s.Registry().Catalog().Lookup("tiny")
	rr, err := s.CreateRun(protocol.NewRun{Tenant: Tenant, SessionID: ss.ID, RequestID: "r" + name, BaseModel: "tiny", ModelRevision: m.Revision, TuningMode: "lora",
		LoRA: &persistence.LoRA{Rank: 4, Seed: seed, TrainAttn: true, TrainMLP: true}})
	if err != nil {
		t.Fatal(err)
	}
	return ss, &rr.Run
}

// Loss is a succeeded operation's summed loss.
func Loss(t testing.TB, op *persistence.Operation) float64 {
	t.Helper()
	if op.Status != states.OpSucceeded {
		t.Fatalf("operation %d %s: %s %v", op.SeqID, op.Kind, op.Status, op.ErrorMessage)
	}
	var r struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal(op.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r.Metrics["loss:sum"]
}

// OpID is the id of run's operation seq.
func OpID(t testing.TB, s *actors.System, run string, seq int64) string {
	t.Helper()
	p, err := s.ListOperations(Tenant, run, seq-1, 1)
	if err != nil || len(p.Items) != 1 {
		t.Fatal(err, p)
	}
	return p.Items[0].ID
}
