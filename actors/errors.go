package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// Error is a refusal with a public error code (see docs/errors.md; the HTTP
// layer maps each code to its status in one table).
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

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
	CodeModelUnavailable    = "model_not_available"
	CodeRevisionMismatch    = "model_revision_mismatch"
	CodeUnsupported         = "operation_not_supported"
	CodeInternal            = "internal_error"
	CodeUnavailable         = "unavailable"

	// Operation and run error codes (not HTTP replies).
	CodeInterrupted = "interrupted"
	CodeCancelled   = "cancelled"
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

// AsError returns err as a public Error: itself, or internal_error.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

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

// errPanic is a job or a handler that panicked: a bug of the service, which
// fails that one operation (internal_error) and leaves the node serving.
var errPanic = errors.New("panic")

// guard runs fn and turns a panic in it into an error wrapping errPanic,
// logged with its stack: no input may take the node down.
func guard(log *slog.Logger, what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("recovered from a panic", "in", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w in %s: %v", errPanic, what, v)
		}
	}()
	return fn()
}
