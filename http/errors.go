package httpapi

import (
	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors/protocol"
)

// Codes the HTTP layer itself answers with (the grains' codes are in
// package actors, the engine's in kernels/kerr).
const (
	codeMalformed        = protocol.CodeMalformed
	codeMalformedMsgpack = "malformed_msgpack"
	codeUnauthorized     = "unauthorized"
	codeTooLarge         = "payload_too_large"
	codeMediaType        = "unsupported_media_type"
	codeMethod           = "method_not_allowed"
	codeHashMismatch     = "request_hash_mismatch"
	codeBadRequest       = "bad_request"
	codeShuttingDown     = "shutting_down"
	codeRange            = "range_not_satisfiable"
)

// statuses is the one table of error code → HTTP status; docs/errors.md
// describes each row, and a test checks that every code has a row there.
var statuses = map[string]int{
	codeMalformed:        fasthttp.StatusBadRequest,
	codeMalformedMsgpack: fasthttp.StatusBadRequest,
	codeBadRequest:       fasthttp.StatusBadRequest,
	codeUnauthorized:     fasthttp.StatusUnauthorized,
	codeTooLarge:         fasthttp.StatusRequestEntityTooLarge,
	codeMediaType:        fasthttp.StatusUnsupportedMediaType,
	codeMethod:           fasthttp.StatusMethodNotAllowed,
	codeHashMismatch:     fasthttp.StatusUnprocessableEntity,
	codeShuttingDown:     fasthttp.StatusServiceUnavailable,
	codeRange:            fasthttp.StatusRequestedRangeNotSatisfiable,
	codeLinkExpired:      fasthttp.StatusForbidden,
	codeLinkInvalid:      fasthttp.StatusForbidden,

	protocol.CodeNotFound:               fasthttp.StatusNotFound,
	protocol.CodeCheckpointNotFound:     fasthttp.StatusNotFound,
	protocol.CodeCredentialNotFound:     fasthttp.StatusNotFound,
	protocol.CodeSeqMismatch:            fasthttp.StatusConflict,
	protocol.CodeIdempotencyConflict:    fasthttp.StatusConflict,
	protocol.CodeRunNotAccepting:        fasthttp.StatusConflict,
	protocol.CodeSessionNotReady:        fasthttp.StatusConflict,
	protocol.CodeRunExists:              fasthttp.StatusConflict,
	protocol.CodeInvalidState:           fasthttp.StatusConflict,
	protocol.CodeValidation:             fasthttp.StatusUnprocessableEntity,
	protocol.CodeModelUnavailable:       fasthttp.StatusUnprocessableEntity,
	protocol.CodeRevisionMismatch:       fasthttp.StatusUnprocessableEntity,
	protocol.CodeUnsupported:            fasthttp.StatusUnprocessableEntity,
	protocol.CodeTuningMode:             fasthttp.StatusUnprocessableEntity,
	protocol.CodeProviderUnavailable:    fasthttp.StatusUnprocessableEntity,
	protocol.CodeProviderFull:           fasthttp.StatusServiceUnavailable,
	protocol.CodeCheckpointRetired:      fasthttp.StatusConflict,
	protocol.CodeArtifactRetired:        fasthttp.StatusConflict,
	protocol.CodeRunNotTerminal:         fasthttp.StatusConflict,
	protocol.CodeNotEligible:            fasthttp.StatusUnprocessableEntity,
	protocol.CodeSamplerNotServing:      fasthttp.StatusConflict,
	protocol.CodeTokenRefused:           fasthttp.StatusUnprocessableEntity,
	protocol.CodeCheckpointIncompatible: fasthttp.StatusUnprocessableEntity,
	protocol.CodeUnavailable:            fasthttp.StatusServiceUnavailable,
	protocol.CodeQueueFull:              fasthttp.StatusTooManyRequests,
	protocol.CodeCapacity:               fasthttp.StatusUnprocessableEntity,
	protocol.CodeLimitExceeded:          fasthttp.StatusTooManyRequests,
	protocol.CodeInsufficientCredit:     fasthttp.StatusPaymentRequired,
	protocol.CodeCostCeiling:            fasthttp.StatusPaymentRequired,
	protocol.CodeInternal:               fasthttp.StatusInternalServerError,

	// The engine's input errors, found when a submission is checked against
	// the run's model.
	"token_out_of_range": fasthttp.StatusUnprocessableEntity,
	"sequence_too_long":  fasthttp.StatusUnprocessableEntity,
	"empty_input":        fasthttp.StatusUnprocessableEntity,
}

// retryAfter is the Retry-After (seconds) that goes with the codes a
// caller should retry later: a full queue drains at the engine's pace, a
// draining node is back after its restart.
var retryAfter = map[string]string{
	protocol.CodeQueueFull:     "1",
	protocol.CodeLimitExceeded: "30",
	protocol.CodeUnavailable:   "1",
	protocol.CodeProviderFull:  "30",
	codeShuttingDown:           "5",
}

// fundingOf is the funding_source an error's envelope names, for the
// codes that concern one: only the platform's ledger refuses credit.
var fundingOf = map[string]string{
	protocol.CodeInsufficientCredit: "platform",
}

// envelope is the error body: exactly the spec's fields.
type envelope struct {
	Error         envelopeError `json:"error"`
	RequestID     string        `json:"request_id,omitempty"`
	FundingSource string        `json:"funding_source,omitempty"`
}

type envelopeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// fail writes the error envelope for code with its status from the table.
func fail(ctx *fasthttp.RequestCtx, code, message string) {
	status, ok := statuses[code]
	if !ok {
		status = fasthttp.StatusInternalServerError
	}
	if after, ok := retryAfter[code]; ok {
		ctx.Response.Header.Set("Retry-After", after)
	}
	write(ctx, status, envelope{Error: envelopeError{Code: code, Message: message}, RequestID: requestID(ctx), FundingSource: fundingOf[code]})
}

// failErr writes err's envelope: a public protocol.Error as it is, anything
// else as internal_error.
func failErr(ctx *fasthttp.RequestCtx, err error) {
	e := protocol.AsError(err)
	fail(ctx, e.Code, e.Message)
}
