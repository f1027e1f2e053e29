package protocol

import (
	"fmt"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/providers/ledger"
)

// Error is a refusal with a public error code (see docs/errors.md; the HTTP
// layer maps each code to its status in one table).
type Error = grain.Error

// AsError returns err as a public Error: itself, or internal_error.
var AsError = grain.AsError

// Codes the grains and the node answer with: every public code has its
// name here (the runtime's, the executors' and admission control's are
// named where their rule lives, and listed here too).
const (
	CodeNotFound            = "not_found"
	CodeSeqMismatch         = "seq_id_mismatch"
	CodeIdempotencyConflict = "idempotency_conflict"
	CodeRunNotAccepting     = "run_not_accepting"
	CodeSessionNotReady     = "session_not_ready"
	CodeRunExists           = "run_already_exists"
	CodeInvalidState        = "state_conflict"
	CodeValidation          = "validation_error"
	CodeMalformed           = "malformed_json"
	CodeModelUnavailable    = "model_not_available"
	CodeRevisionMismatch    = "model_revision_mismatch"
	CodeUnsupported         = "operation_not_supported"
	CodeInternal            = grain.CodeInternal
	CodeUnavailable         = grain.CodeUnavailable
	CodeQueueFull           = limits.CodeQueueFull
	CodeLimitExceeded       = limits.CodeLimitExceeded
	CodeInsufficientCredit  = ledger.CodeInsufficientCredit
	CodeCostCeiling         = ledger.CodeCostCeiling

	// Operation and run error codes (not HTTP replies).
	CodeInterrupted = "interrupted"
	CodeCancelled   = executor.CodeCancelled
	CodeCapacity    = executor.CodeCapacity
	CodePoisoned    = "run_poisoned"
	CodeTimedOut    = "lease_expired"
)

// Codes of session and run creation.
const (
	CodeProviderUnavailable = "provider_unavailable"
	// CodeProviderFull refuses a provider_a session while every dedicated
	// trainer is held.
	CodeProviderFull       = "provider_at_capacity"
	CodeCredentialNotFound = "credential_not_found"
	CodeCheckpointNotFound = "checkpoint_not_found"
	CodeTuningMode         = "tuning_mode_not_supported"

	CodeCheckpointRetired      = "checkpoint_retired"
	CodeRunNotTerminal         = "run_not_terminal"
	CodeCheckpointIncompatible = "checkpoint_incompatible"
)

// Codes of sampler operations.
const (
	CodeUnreachable       = "weight_version_unreachable"
	CodeSamplerNotServing = "sampler_not_accepting"
	CodeSamplerFailed     = "sampler_failed"
)

// Codes of artifacts and exports.
const (
	// CodeArtifactRetired refuses links to an artifact whose files are gone.
	CodeArtifactRetired = "artifact_retired"
	CodeNotEligible     = "export_not_eligible"
	CodeTokenRefused    = "token_not_accepted"
)

// Refuse is a refusal with code and a formatted message.
func Refuse(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Reused refuses a creation whose request_id was used before, in the same
// scope, with another body: retrying is safe only with the same request.
func Reused(what, requestID string) *Error {
	return Refuse(CodeIdempotencyConflict, "request_id %q made a %s from another body; a retry must send the same body, new work a new request_id", requestID, what)
}

// NotFound is the refusal of a record that is not there, or is another
// tenant's (ids leak nothing).
func NotFound(what, id string) *Error {
	return Refuse(CodeNotFound, "%s %s not found", what, id)
}
