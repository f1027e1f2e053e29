package grain

import (
	"fmt"
	"log/slog"
	"reflect"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/wts-project/wts/actors/wire"
)

// Local is a message between actors of one node: its request travels as
// the Go value it is, where a wire.Call carries msgpack bytes. Encoding and
// decoding every message and reply was a large share of the service's CPU
// and garbage under load (bench/apibench; commit 92c375f has the figures) for envelopes that never left
// the process. What a message or a reply holds belongs to its receiver
// from then on: senders build them fresh and keep no reference that they
// change.
type Local struct {
	Method  string
	Val     any
	Counted bool // an executor's report (see Router.Report)
}

// localReply answers a Local call: the handler's result, or its error's
// code and message.
type localReply struct {
	val           any
	code, message string
}

// In is a request as its handler gets it: a value from this node (val) or
// msgpack bytes from another (body).
type In struct {
	val  any
	body []byte
}

// Value is a request handed over on this node (tests and executors build
// them).
func Value(v any) In { return In{val: v} }

// Bytes is a request that came as msgpack bytes.
func Bytes(b []byte) In { return In{body: b} }

// Request unpacks an actor's message: its method and request, and whether
// it came from this node. ok is false for messages that are not calls.
func Request(m any) (method string, in In, isLocal, ok bool) {
	switch c := m.(type) {
	case *Local:
		return c.Method, In{val: c.Val}, true, true
	case *wire.Call:
		return c.Method, In{body: c.Body}, false, true
	}
	return "", In{}, false, false
}

// Handler answers one method of a grain.
type Handler func(ctx actor.Context, in In) (any, error)

// Answer runs h and replies to the sender (if any) with its result, in the
// form the call came in.
func Answer(ctx actor.Context, log *slog.Logger, method string, in In, isLocal bool, h Handler) {
	resp, err := h(ctx, in)
	if ctx.Sender() == nil {
		if err != nil {
			log.Error("message failed", "method", method, "err", err)
		}
		return
	}
	var code, message string
	if err != nil {
		e := AsError(err)
		if e.Code == CodeInternal {
			log.Error("request failed", "method", method, "err", err)
		}
		code, message = e.Code, e.Message
	}
	if isLocal {
		ctx.Respond(&localReply{val: resp, code: code, message: message})
		return
	}
	rep := &wire.Reply{Code: code, Message: message}
	if err == nil && resp != nil {
		if rep.Body, err = msgpack.Marshal(resp); err != nil {
			rep.Code, rep.Message = CodeInternal, "internal error"
			log.Error("encode reply", "method", method, "err", err)
		}
	}
	ctx.Respond(rep)
}

// Decode is a handler's request as a *T: the value itself when the sender
// passed a T or *T on this node, else decoded from msgpack (a message from
// another node, or a value of another type, which goes through msgpack as
// it would between nodes).
func Decode[T any](in In) (*T, error) {
	switch v := in.val.(type) {
	case *T:
		return v, nil
	case T:
		return &v, nil
	case nil:
	default:
		body, err := msgpack.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		in.body = body
	}
	v := new(T)
	if err := msgpack.Unmarshal(in.body, v); err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	return v, nil
}

// assign puts a local reply's value into resp (a pointer): directly when
// the types agree, else through msgpack.
func assign(resp, val any) error {
	dst, v := reflect.ValueOf(resp).Elem(), reflect.ValueOf(val)
	switch {
	case v.Type() == dst.Type():
		dst.Set(v)
		return nil
	case v.Kind() == reflect.Pointer && v.Type().Elem() == dst.Type():
		if !v.IsNil() {
			dst.Set(v.Elem())
		}
		return nil
	}
	body, err := msgpack.Marshal(val)
	if err != nil {
		return err
	}
	return msgpack.Unmarshal(body, resp)
}
