package executor

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/persistence"
)

// Budget is the node's budget for the engine's per-run memory: the runs'
// trainers, the samplers' adapters, and the KV caches of the requests
// decoding. Each executor takes what it is about to allocate and gives it
// back when it lets go. When the budget is short it evicts its own idle
// holdings (trainers to their snapshot, adapters nothing decodes with) and
// asks the other executor to do the same; the work that needs the memory
// waits meanwhile. A run or a request that could never fit is refused when
// it is submitted (capacity_exceeded), so nothing waits for ever.
type Budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

// newBudget is a budget of limit bytes (0 or less: no bound).
func newBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = math.MaxInt64 / 2
	}
	return &Budget{limit: limit}
}

// Limit is the budget's bytes.
func (m *Budget) Limit() int64 { return m.limit }

// errNoRoom is memory the budget cannot give yet: the work waits.
var errNoRoom = errors.New("the node's memory budget is in use")

// CodeCapacity refuses a run or a request larger than the node's whole
// budget.
const CodeCapacity = "capacity_exceeded"

func (m *Budget) take(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.used+n > m.limit {
		return false
	}
	m.used += n
	return true
}

func (m *Budget) give(n int64) {
	m.mu.Lock()
	m.used -= n
	m.mu.Unlock()
}

// InUse is the bytes taken.
func (m *Budget) InUse() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// Fits refuses what the whole budget could not hold.
func (m *Budget) Fits(what string, n int64) error {
	if n > m.limit {
		return refuse(CodeCapacity, "%s: %.2f MiB of memory, more than this node's whole budget for trainers, adapters and KV caches (%.2f MiB)", what, float64(n)/(1<<20), float64(m.limit)/(1<<20))
	}
	return nil
}

const f32 = 4 // bytes per value

// TrainerBytes is a run's trainer: its adapter, the gradient accumulator,
// AdamW's two moments, and the gradient of the batch being computed.
func TrainerBytes(mc model.Config, l *persistence.LoRA) int64 {
	return 5 * f32 * LoRAConfig(l).Values(mc)
}

// adapterBytes is a sampler's adapter held for decoding: the adapter and
// its packed copy (transformer.Frozen).
func adapterBytes(mc model.Config, c lora.Config) int64 {
	return 2 * f32 * c.Values(mc)
}

// RequestKV is the KV memory a sample or logprobs payload needs, 0 for
// other kinds.
func RequestKV(mc model.Config, p payload.Parsed) int64 {
	switch p := p.(type) {
	case *payload.SamplePayload:
		q := p.Request()
		return kvBytes(mc, len(q.Prompt), q.NumSamples, q.Params.MaxTokens)
	case *payload.LogprobsPayload:
		return kvBytes(mc, len(p.Input.TokenIDs), 0, 0)
	}
	return 0
}

// kvBytes is a sample request's KV caches: the prompt's, shared, and
// max_tokens more positions for each sample, in every layer, plus a logits
// row per sample.
func kvBytes(mc model.Config, prompt, samples, maxTokens int) int64 {
	perPosition := int64(2 * mc.Layers * mc.KVHeads * mc.HeadDim * f32)
	return perPosition*int64(prompt+samples*maxTokens) + int64(samples*mc.Vocab*f32)
}

// refuse is a refusal with a public code.
func refuse(code, format string, args ...any) *grain.Error {
	return &grain.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// MergeBytes is what building a merged model takes: the base model and its
// merged copy.
func MergeBytes(mc model.Config) int64 { return 2 * f32 * mc.Values() }
