// Package states holds the state machines of the service's records, as
// tables: sessions, runs, operations, samplers, checkpoints and artifacts,
// exports and usage settlement. A status moves only along an edge its table
// lists (Move); docs/states.md prints them.
package states

import (
	"errors"
	"fmt"

	"github.com/wts-project/wts/providers"
)

// A record is created in its first status, and every later change goes
// through Move (actors' TestStatusesMoveByTable finds any other assignment),
// so the tables are the whole rule.

// Session statuses.
const (
	SessionProvisioning = "provisioning"
	SessionReady        = "ready"
	SessionFailed       = "failed"
	SessionClosing      = "closing"
	SessionClosed       = "closed"
	SessionInterrupted  = "interrupted"
	SessionTimedOut     = "timed_out"
)

// Run statuses.
const (
	RunCreated         = "created"
	RunRunning         = "running"
	RunPoisoned        = "poisoned"
	RunFinishing       = "finishing"
	RunFinished        = "finished"
	RunCancelRequested = "cancel_requested"
	RunCancelled       = "cancelled"
	RunFailed          = "failed"
	RunInterrupted     = "interrupted"
	RunTimedOut        = "timed_out"
)

// Operation statuses.
const (
	OpParked    = "parked"
	OpPending   = "pending"
	OpExecuting = "executing"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
	OpCancelled = "cancelled"
)

// Checkpoint and artifact statuses.
const (
	Available = "available"
	Retired   = "retired"
)

// Export statuses: an export is accepted pending, moves to uploading when
// the exporter takes it, and ends succeeded or failed (with an error code).
// After a restart, pending and uploading exports are taken again: every
// step of the Hub protocol may be repeated.
const (
	ExportPending   = "pending"
	ExportUploading = "uploading"
	ExportSucceeded = "succeeded"
	ExportFailed    = "failed"
)

// Sampler statuses.
const (
	SamplerAbsent       = "absent"       // released from memory; comes back on demand
	SamplerProvisioning = "provisioning" // loading its first (or, after absent, its) weights
	SamplerReady        = "ready"
	SamplerSyncing      = "syncing" // loading a newer weight version of its run
	SamplerFailed       = "failed"  // a sync failed; a newer version tries again
	SamplerRetired      = "retired"
)

// SessionMoves is the session table.
var SessionMoves = map[string][]string{
	SessionProvisioning: {SessionReady, SessionFailed, SessionClosing, SessionTimedOut},
	SessionReady:        {SessionClosing, SessionInterrupted, SessionTimedOut},
	SessionClosing:      {SessionClosed},
	SessionFailed:       {},
	SessionClosed:       {},
	SessionInterrupted:  {},
	SessionTimedOut:     {},
}

// RunMoves is the run table.
var RunMoves = map[string][]string{
	RunCreated:         {RunRunning, RunFinishing, RunCancelRequested, RunCancelled, RunFailed, RunInterrupted, RunTimedOut},
	RunRunning:         {RunPoisoned, RunFinishing, RunCancelRequested, RunCancelled, RunFailed, RunInterrupted, RunTimedOut},
	RunFinishing:       {RunFinished, RunPoisoned, RunCancelRequested, RunCancelled, RunInterrupted, RunTimedOut},
	RunCancelRequested: {RunCancelled},
	RunPoisoned:        {},
	RunFinished:        {},
	RunCancelled:       {},
	RunFailed:          {},
	RunInterrupted:     {},
	RunTimedOut:        {},
}

// OpMoves is the operation table.
var OpMoves = map[string][]string{
	OpParked:    {OpPending, OpCancelled, OpFailed},
	OpPending:   {OpExecuting, OpSucceeded, OpCancelled, OpFailed},
	OpExecuting: {OpSucceeded, OpFailed, OpCancelled, OpPending}, // pending: the node stopped under it (it runs again)
	OpSucceeded: {},
	OpFailed:    {},
	OpCancelled: {},
}

// SamplerMoves is the sampler table.
var SamplerMoves = map[string][]string{
	SamplerProvisioning: {SamplerReady, SamplerFailed, SamplerRetired},
	SamplerReady:        {SamplerSyncing, SamplerAbsent, SamplerRetired},
	SamplerSyncing:      {SamplerReady, SamplerFailed, SamplerRetired},
	SamplerAbsent:       {SamplerProvisioning, SamplerRetired},
	SamplerFailed:       {SamplerSyncing, SamplerRetired},
	SamplerRetired:      {},
}

// OutputMoves is the table of checkpoints and artifacts: retiring their run
// retires them.
var OutputMoves = map[string][]string{
	Available: {Retired},
	Retired:   {},
}

// ExportMoves is the export table. An upload cut short by the node's stop
// stays uploading and is taken again after the next start.
var ExportMoves = map[string][]string{
	ExportPending:   {ExportUploading},
	ExportUploading: {ExportSucceeded, ExportFailed},
	ExportSucceeded: {},
	ExportFailed:    {},
}

// SettlementMoves is the table of a usage component's settlement.
var SettlementMoves = map[string][]string{
	providers.Pending: {providers.Settled},
	providers.Settled: {},
}

// ErrIllegalMove is a status change that its table does not allow: a bug
// of the service, which fails the write that tried it.
var ErrIllegalMove = errors.New("illegal status change")

// Move sets *status to to if the table allows it.
func Move(table map[string][]string, status *string, to string) error {
	for _, s := range table[*status] {
		if s == to {
			*status = to
			return nil
		}
	}
	return fmt.Errorf("%w: %q -> %q", ErrIllegalMove, *status, to)
}

// Terminal reports whether a status has no way out.
func Terminal(table map[string][]string, status string) bool {
	return len(table[status]) == 0
}
