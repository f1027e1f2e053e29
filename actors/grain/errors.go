package grain

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// Error is a refusal with a public error code (docs/errors.md; the HTTP
// layer maps each code to its status in one table). It is what crosses a
// grain call as a reply's code and message.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Codes of the runtime itself.
const (
	CodeInternal    = "internal_error"
	CodeUnavailable = "unavailable"
)

// AsError returns err as a public Error: itself, or internal_error.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// ErrFenced refuses what an activation does once a newer activation of its
// grain holds the lease (two members briefly disagreeing about where the
// grain lives): the activation leaves, and the caller, told to try again,
// reaches the newer one.
var ErrFenced = &Error{Code: CodeUnavailable, Message: "a newer activation of this resource took over; try again"}

// ErrPanic is a handler or a job that panicked: a bug of the service, which
// fails that one call or operation (internal_error) and leaves the node
// serving.
var ErrPanic = errors.New("panic")

// Guard runs fn and turns a panic in it into an error wrapping ErrPanic,
// logged with its stack: no input may take the node down.
func Guard(log *slog.Logger, what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("recovered from a panic", "in", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w in %s: %v", ErrPanic, what, v)
		}
	}()
	return fn()
}
