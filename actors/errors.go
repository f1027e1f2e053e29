package actors

import (
	"errors"
	"fmt"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/grain"
)

// Error is a refusal with a public error code (see docs/errors.md; the HTTP
// layer maps each code to its status in one table).
type Error = grain.Error

// AsError returns err as a public Error: itself, or internal_error.
var AsError = grain.AsError

// Codes the grains answer with.
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

	// Operation and run error codes (not HTTP replies).
	CodeInterrupted = "interrupted"
	CodeCancelled   = executor.CodeCancelled
	CodeCapacity    = executor.CodeCapacity
	CodePoisoned    = "run_poisoned"
	CodeTimedOut    = "lease_expired"
)

func refuse(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func notFound(what, id string) *Error {
	return refuse(CodeNotFound, "%s %s not found", what, id)
}

// errFenced is a write refused because a newer activation of the grain
// holds the lease.
var errFenced = errors.New("grain fenced: a newer activation holds the lease")

// Codes of session and run creation.
const (
	CodeProviderUnavailable = "provider_unavailable"
	CodeCredentialNotFound  = "credential_not_found"
	CodeCheckpointNotFound  = "checkpoint_not_found"
	CodeTuningMode          = "tuning_mode_not_supported"

	CodeCheckpointRetired      = "checkpoint_retired"
	CodeRunNotTerminal         = "run_not_terminal"
	CodeCheckpointIncompatible = "checkpoint_incompatible"
)
