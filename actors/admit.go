package actors

import (
	"errors"
	"slices"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/persistence"
)

// ordered is what a run or a sampler grain gives admit, the one admission
// path of its ordered operations.
type ordered interface {
	// owner is the tenant whose grain it is: another's submission finds
	// nothing.
	owner() persistence.Tenant
	// rules are what a payload is checked against, built once per grain.
	rules() (*submitRules, error)
	// takes refuses when the grain's status takes no operations.
	takes() error
	nextSeq() int64
	depth() int // operations queued or executing
	// accept writes the operation at the next seq_id durably (the
	// session's lease and the grain's fence are checked inside the write)
	// and queues it.
	accept(sub *Submission, key []byte, p payload.Parsed) (*persistence.Operation, error)
}

// submitRules are what a grain's submissions are checked against; none of
// it changes while the grain is active.
type submitRules struct {
	what    string         // "run" or "sampler", for refusals and the queue limits
	scope   executor.Scope // where the kinds are submitted
	offered []string       // the kinds the session's capability row offers there
	model   model.Config
	// run is the run whose checkpoints load_state and export_lora may
	// name (nil for a sampler); only what never changes in a run is read
	// of it (its model, revision and adapter shape).
	run *persistence.Run
}

// admit is the one admission path of an ordered operation, run inside the
// grain's mailbox on what the grain holds: the caller's tenant, a repeat
// of an idempotency key (the original operation, or a conflict when the
// request hash differs), the payload against its kind's rules and the
// model, the grain's status, seq_id order, and the queue limits; then the
// grain writes it (accept). The request hash itself is checked against the
// body where the body is decoded (http), before any grain sees it.
func (o *opOwner) admit(in grain.In, g ordered) (*Accepted, error) {
	sub, err := grain.Decode[Submission](in)
	if err != nil {
		return nil, err
	}
	r, err := g.rules()
	if err != nil {
		return nil, err
	}
	if sub.Tenant != g.owner() {
		return nil, notFound(r.what, o.ID)
	}
	key := persistence.IdemKey(o.ID, sub.IdempotencyKey)
	if acc, err := repeated(o.sys, o.ID, key, sub); err != nil || acc != nil {
		return acc, err
	}
	p, err := o.sys.checkPayload(sub, r)
	if err != nil {
		return nil, err
	}
	if err := g.takes(); err != nil {
		return nil, err
	}
	if next := g.nextSeq(); sub.SeqID != next {
		return nil, refuse(CodeSeqMismatch, "seq_id %d does not match the %s's next_seq_id %d", sub.SeqID, r.what, next)
	}
	if err := o.sys.adm.admit(sub.Tenant.Org, r.what, g.depth()); err != nil {
		return nil, err
	}
	op, err := g.accept(sub, key, p)
	if err != nil {
		return nil, err
	}
	return handle(op, true), nil
}

// checkPayload checks a submission's kind against those offered where it
// was sent, and its payload against the kind's schema, the model, the
// node's memory and (load_state, export_lora) the checkpoint it names.
func (s *System) checkPayload(sub *Submission, r *submitRules) (payload.Parsed, error) {
	if executor.KindOf(sub.Kind).Scope&r.scope == 0 || !slices.Contains(r.offered, sub.Kind) {
		return nil, refuse(CodeUnsupported, "operation %s is not offered here", sub.Kind)
	}
	p, err := executor.Parse(sub.Kind, sub.Payload)
	if err != nil {
		return nil, schemaRefusal(err)
	}
	if err := payload.CheckModel(p, r.model); err != nil {
		return nil, engineRefusal(err)
	}
	if kv := executor.RequestKV(r.model, p); kv > 0 {
		if err := s.mem.Fits("the request's KV caches", kv); err != nil {
			return nil, err
		}
	}
	if r.run == nil {
		return p, nil
	}
	if sub.Kind == payload.Sample && payload.Required(p) != nil {
		return nil, refuse(CodeValidation, "payload.required_weight_version: a run-scoped sample always samples the run's current weights; send it to the sampler instead")
	}
	return p, s.checkReferences(sub.Tenant, r.run, p)
}

// schemaRefusal is a payload's schema error as the refusal it answers
// (a grain's reply carries a code and a message, not an error's type).
func schemaRefusal(err error) error {
	var inv *payload.Invalid
	var mal *payload.Malformed
	switch {
	case errors.As(err, &mal):
		return &Error{Code: CodeMalformed, Message: mal.Error()}
	case errors.As(err, &inv):
		return &Error{Code: CodeValidation, Message: inv.Error()}
	}
	return err
}

// checkReferences checks the checkpoint a load_state or export_lora names:
// the caller's, not retired, and made for this run's model and adapter
// shape.
func (s *System) checkReferences(t persistence.Tenant, run *persistence.Run, p payload.Parsed) error {
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
	cp, err := s.checkpoint(id)
	if err != nil {
		return err
	}
	return usable(cp, t, run.BaseModel, run.ModelRevision, run.LoRA)
}
