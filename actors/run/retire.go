package run

import (
	"fmt"
	"os"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
)

// retire removes a terminal run's artifact prefix: its checkpoints and
// artifacts become retired and their files are deleted, and its sampler is
// retired. Its training volume (snapshots, the state it started from) is
// never touched. Retiring again is harmless, and finishes a removal a crash
// cut short.
func (g *Grain) retire(_ actor.Context, in grain.In) (any, error) {
	req, err := grain.Decode[protocol.Control](in)
	if err != nil {
		return nil, err
	}
	if req.Tenant != g.run.Tenant {
		return nil, protocol.NotFound("run", g.ID)
	}
	if !states.Terminal(states.RunMoves, g.run.Status) {
		return nil, protocol.Refuse(protocol.CodeRunNotTerminal, "run %s is %s; only a run that has ended can be retired", g.ID, g.run.Status)
	}
	err = g.write(func(tx persistence.Tx, r *persistence.Run) error {
		r.Retired = true
		return artifacts.Retire(tx, r.ID)
	})
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(g.N.Volume.ArtifactPrefix(g.ID)); err != nil {
		return nil, fmt.Errorf("remove the artifact prefix of %s: %w", g.ID, err)
	}
	if g.run.SamplerID != "" {
		if err := g.N.Sampler(g.run.SamplerID).Retire(); err != nil {
			return nil, fmt.Errorf("retire sampler %s: %w", g.run.SamplerID, err)
		}
	}
	return &protocol.RetireReply{ID: g.ID, Status: g.run.Status, Retired: true}, nil
}
