// Package providers holds the two providers' capability rows, the routing of
// a new session to one of them, and their lease rules.
//
// Both providers run on the cluster's own executors; what tells them apart
// is their contract: provider_a gives each session a dedicated trainer
// (actors/slots), pins model revisions to the catalog commit, caps a
// session's idle lease at its trainer lifetime and bills device time that
// settles later; provider_b runs sessions on a shared pool, manages model
// identity itself and bills tokens settled at once (billing.go). Each may
// offer only some of the catalog's models.
package providers

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wts-project/wts/kernels/lora"
)

// Provider names, as the API spells them.
const (
	A = "provider_a"
	B = "provider_b"
)

// Order is the service's own provider order for provider "auto".
var Order = []string{A, B}

// Operations a run accepts, and a sampler.
var (
	Operations        = []string{"forward", "forward_backward", "optim_step", "save_state", "load_state", "save_weights_for_sampler", "export_lora", "sample"}
	SamplerOperations = []string{"sample", "logprobs"}
)

// Profile is one resource profile of a capability row.
type Profile struct {
	Device      string   `json:"device"`
	TuningModes []string `json:"tuning_modes"`
	MaxLoRARank int      `json:"max_lora_rank"`
	MaxSeqLen   int      `json:"max_seq_len"`
	// Weights is how each offered model's base weights are kept (Model.Weights):
	// what a run's numbers are computed from.
	Weights map[string]string `json:"weights,omitempty"`
}

// Capability is a provider's capability row, as the API returns it.
type Capability struct {
	Provider          string             `json:"provider"`
	Models            []string           `json:"models"`
	Operations        []string           `json:"operations"`
	SamplerOperations []string           `json:"sampler_operations"`
	ResourceProfiles  map[string]Profile `json:"resource_profiles"`
	BillingSnapshot   Billing            `json:"billing_snapshot"`
}

// DefaultProfile is the resource profile a run gets.
const DefaultProfile = "cpu-default"

// TrainerLifetime caps provider_a's idle lease: its trainers are recycled
// after this long without a heartbeat.
const TrainerLifetime = 4 * time.Hour

// ErrUnavailable refuses a provider this node does not offer.
var ErrUnavailable = errors.New("provider is not available")

// Registry is the providers this node offers and their capability rows.
type Registry struct {
	catalog *Catalog
	rows    map[string]*Capability
}

// NewRegistry builds the capability rows over the catalog. offers names,
// per provider, the catalog models it offers; a provider it does not name
// offers every model, one it names with no model is not offered at all.
// An operator restricts a provider this way when its contract covers only
// some models (docs/billing.md).
func NewRegistry(c *Catalog, offers map[string][]string) (*Registry, error) {
	for p, models := range offers {
		if !slices.Contains(Order, p) {
			return nil, fmt.Errorf("offer for %q: want one of %v", p, Order)
		}
		for _, m := range models {
			if _, ok := c.Lookup(m); !ok {
				return nil, fmt.Errorf("offer of %s: model %q is not in the catalog %v", p, m, c.Names())
			}
		}
	}
	r := &Registry{catalog: c, rows: map[string]*Capability{}}
	for _, p := range Order {
		models, restricted := offers[p]
		if !restricted {
			models = c.Names()
		}
		if len(models) == 0 {
			continue
		}
		models = slices.Compact(slices.Sorted(slices.Values(models)))
		maxSeq, weights := 0, map[string]string{}
		for _, n := range models {
			m, _ := c.Lookup(n)
			maxSeq, weights[n] = max(maxSeq, m.Config.MaxPos), m.Weights
		}
		r.rows[p] = &Capability{
			Provider:          p,
			Models:            models,
			Operations:        Operations,
			SamplerOperations: SamplerOperations,
			ResourceProfiles: map[string]Profile{DefaultProfile: {
				Device: "cpu", TuningModes: []string{"lora"}, MaxLoRARank: lora.MaxRank, MaxSeqLen: maxSeq, Weights: weights,
			}},
			BillingSnapshot: PriceList(p),
		}
	}
	if len(r.rows) == 0 {
		return nil, errors.New("no provider offers a model")
	}
	return r, nil
}

// Catalog is the model catalog behind the rows.
func (r *Registry) Catalog() *Catalog { return r.catalog }

// Offering lists, in the service's order, the providers that offer model.
func (r *Registry) Offering(model string) []string {
	out := []string{}
	for _, p := range Order {
		if row := r.rows[p]; row != nil && slices.Contains(row.Models, model) {
			out = append(out, p)
		}
	}
	return out
}

// Row is provider p's capability row, nil when this node does not offer p.
func (r *Registry) Row(p string) *Capability { return r.rows[p] }

// Route lists, in order, the providers a new session may go to: an
// explicit choice alone, which must be offered; for "auto", the offered
// providers of the caller's preferences, then of the service's order. The
// session takes the first with room (a provider_a session needs a free
// dedicated trainer).
func (r *Registry) Route(provider string, preferences []string) ([]string, error) {
	if provider != "" && provider != "auto" {
		if r.rows[provider] == nil {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, provider)
		}
		return []string{provider}, nil
	}
	var out []string
	for _, p := range slices.Concat(preferences, Order) {
		if r.rows[p] != nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, ErrUnavailable
	}
	return out, nil
}

// Dedicated reports whether provider p runs each session on a dedicated
// trainer (reserved for the session's lifetime, actors/slots): provider_a;
// provider_b's runs share a pool.
func Dedicated(p string) bool { return p == A }

// LeaseLimit caps the idle lease of provider p's sessions (0: no cap).
func LeaseLimit(p string) time.Duration {
	if p == A {
		return TrainerLifetime
	}
	return 0
}

// CheckRevision applies the provider's model-identity rule: provider_a runs
// only the catalog's pinned revision; provider_b manages identity itself.
func CheckRevision(provider string, m *Model, revision string) bool {
	return provider != A || revision == m.Revision
}
