package oplog

import (
	"errors"
	"slices"

	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/persistence"
)

// Ordered is what a run or a sampler grain gives Admit, the one admission
// path of its ordered operations.
type Ordered interface {
	// Tenant is the tenant whose grain it is: another's submission finds
	// nothing.
	Tenant() persistence.Tenant
	// Rules are what a payload is checked against, built once per grain.
	Rules() (*Rules, error)
	// Takes refuses when the grain's status takes no operations.
	Takes() error
	NextSeq() int64
	Depth() int // operations queued or executing
	// Accept writes the operation at the next seq_id durably (the
	// session's lease and the grain's fence are checked inside the write,
	// and its estimated cost hold held under the session's ceiling) and
	// queues it.
	Accept(sub *protocol.Submission, key []byte, p payload.Parsed, hold int64) (*persistence.Operation, error)
}

// Rules are what a grain's submissions are checked against; none of it
// changes while the grain is active.
type Rules struct {
	What    string         // "run" or "sampler", for refusals and the queue limits
	Scope   executor.Scope // where the kinds are submitted
	Offered []string       // the kinds the session's capability row offers there
	Model   model.Config
	Params  int64 // the model's parameters, for cost estimates
	// Run is the run whose checkpoints load_state and export_lora may
	// name (nil for a sampler); only what never changes in a run is read
	// of it (its model, revision and adapter shape).
	Run *persistence.Run
}

// Admit is the one admission path of an ordered operation, run inside the
// grain's mailbox on what the grain holds: the caller's tenant, a repeat
// of an idempotency key (the original operation, or a conflict when the
// request hash differs), the payload against its kind's rules and the
// model, the grain's status, seq_id order, and the queue limits; then the
// grain writes it (Accept). The request hash itself is checked against the
// body where the body is decoded (http), before any grain sees it.
func (o *Owner) Admit(in grain.In, g Ordered) (*protocol.Accepted, error) {
	sub, err := grain.Decode[protocol.Submission](in)
	if err != nil {
		return nil, err
	}
	r, err := g.Rules()
	if err != nil {
		return nil, err
	}
	if sub.Tenant != g.Tenant() {
		return nil, protocol.NotFound(r.What, o.ID)
	}
	key := persistence.IdemKey(o.ID, sub.IdempotencyKey)
	if acc, err := repeated(o.N.Store, o.ID, key, sub); err != nil || acc != nil {
		return acc, err
	}
	p, err := checkPayload(o.N, sub, r)
	if err != nil {
		return nil, err
	}
	if err := g.Takes(); err != nil {
		return nil, o.refuse(err)
	}
	if next := g.NextSeq(); sub.SeqID != next {
		return nil, o.refuse(protocol.Refuse(protocol.CodeSeqMismatch, "seq_id %d does not match the %s's next_seq_id %d", sub.SeqID, r.What, next))
	}
	if err := o.N.Limits.Admit(sub.Tenant.Org, r.What, g.Depth()); err != nil {
		return nil, err
	}
	op, err := g.Accept(sub, key, p, usage.Estimate(o.prices, sub.Kind, p, r.Params))
	if err != nil {
		return nil, err
	}
	return Handle(op, true), nil
}

// refuse is a refusal drawn from what the activation holds in memory,
// unless the store shows a newer activation holds the lease (Owns).
func (o *Owner) refuse(err error) error {
	if errors.Is(o.Owns(), grain.ErrFenced) {
		return grain.ErrFenced
	}
	return err
}

// checkPayload checks a submission's kind against those offered where it
// was sent, and its payload against the kind's schema, the model, the
// node's memory and (load_state, export_lora) the checkpoint it names.
func checkPayload(n *protocol.Node, sub *protocol.Submission, r *Rules) (payload.Parsed, error) {
	if executor.KindOf(sub.Kind).Scope&r.Scope == 0 || !slices.Contains(r.Offered, sub.Kind) {
		return nil, protocol.Refuse(protocol.CodeUnsupported, "operation %s is not offered here", sub.Kind)
	}
	p, err := executor.Parse(sub.Kind, sub.Payload)
	if err != nil {
		return nil, schemaRefusal(err)
	}
	if err := payload.CheckModel(p, r.Model); err != nil {
		return nil, engineRefusal(err)
	}
	if kv := executor.RequestKV(r.Model, p); kv > 0 {
		if err := n.Memory.Fits("the request's KV caches", kv); err != nil {
			return nil, err
		}
	}
	if r.Run == nil {
		return p, nil
	}
	if sub.Kind == payload.Sample && payload.Required(p) != nil {
		return nil, protocol.Refuse(protocol.CodeValidation, "payload.required_weight_version: a run-scoped sample always samples the run's current weights; send it to the sampler instead")
	}
	return p, checkReferences(n.Store, sub.Tenant, r.Run, p)
}

// schemaRefusal is a payload's schema error as the refusal it answers
// (a grain's reply carries a code and a message, not an error's type).
func schemaRefusal(err error) error {
	var inv *payload.Invalid
	var mal *payload.Malformed
	switch {
	case errors.As(err, &mal):
		return &protocol.Error{Code: protocol.CodeMalformed, Message: mal.Error()}
	case errors.As(err, &inv):
		return &protocol.Error{Code: protocol.CodeValidation, Message: inv.Error()}
	}
	return err
}

// checkReferences checks the checkpoint a load_state or export_lora names:
// the caller's, not retired, and made for this run's model and adapter
// shape.
func checkReferences(st persistence.Store, t persistence.Tenant, run *persistence.Run, p payload.Parsed) error {
	var id string
	switch p := p.(type) {
	case *payload.Load:
		id = p.CheckpointID
	case *payload.Export:
		id = p.CheckpointID
	}
	if id == "" {
		return nil
	}
	cp, err := artifacts.Checkpoint(st, id)
	if err != nil {
		return err
	}
	return artifacts.Usable(cp, t, run.BaseModel, run.ModelRevision, run.LoRA)
}

// engineRefusal turns an engine input error into a validation refusal with
// the engine's code.
func engineRefusal(err error) error {
	if code := kerr.Code(err); code != "" {
		return &protocol.Error{Code: code, Message: err.Error()}
	}
	var e *protocol.Error
	if errors.As(err, &e) {
		return e
	}
	return err
}
