// Package protocol is the vocabulary of a node's grains: the messages and
// replies they and the node's front door exchange, the typed client of each
// grain kind and executor, the public refusal codes, the identifiers, and
// Node, what every grain reaches on its node. The grain kinds (session, run,
// sampler) each have their package and talk to one another only through
// this one, so none imports another.
package protocol

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/reminder"
	"github.com/wts-project/wts/actors/slots"
	"github.com/wts-project/wts/actors/telemetry"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// Node is what every grain reaches on its node: the store and the run
// volume, the clock, the router to other grains and the executors,
// reminders, admission limits, the memory budget and the providers. The
// node (package actors) builds one and gives it to each grain kind.
type Node struct {
	Store     persistence.Store
	Volume    persistence.Volume
	Registry  *providers.Registry
	Log       *slog.Logger
	Metrics   *telemetry.Metrics
	Clock     func() time.Time
	Router    *grain.Router
	Runtime   *grain.Runtime
	Reminders *reminder.Set
	Limits    *limits.Counter
	Memory    *executor.Budget
	// Trainer is the trainer's executor (merged-weights builds take a turn
	// on it); TrainerPID and SamplingPID are the executors' mailboxes.
	Trainer                 *executor.Trainer
	TrainerPID, SamplingPID *actor.PID
	// SamplerIdle is how long a sampler may go unused before it releases
	// its adapter from memory.
	SamplerIdle time.Duration
	// SettleAfter is how long after it is observed a pending usage
	// component is settled (actors/usage, Settler).
	SettleAfter time.Duration
	// Trainers lists the members that host runs and the dedicated
	// trainers each offers (provider_a's, actors/slots); Self is this
	// node's member id among them.
	Trainers func() []slots.Member
	Self     string
}

// Now is the node's time, in UTC.
func (n *Node) Now() time.Time { return n.Clock().UTC() }

// Awake answers a call that only activates its grain.
func Awake(actor.Context, grain.In) (any, error) { return struct{}{}, nil }
