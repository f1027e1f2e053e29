package httpapi

import (
	"fmt"
	"mime"
	"strconv"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/http/codec"
)

// Bodies are JSON or MessagePack, the same shapes in both. A request says
// which it sends with Content-Type; a response is msgpack only when the
// caller's Accept prefers it, and JSON otherwise (an Accept we cannot meet is
// ignored rather than refused, as RFC 9110 allows).

const (
	mimeJSON    = "application/json"
	mimeMsgpack = "application/msgpack"
)

// bodyMedia maps each accepted request Content-Type to its canonical name.
var bodyMedia = map[string]string{
	mimeJSON:                mimeJSON,
	mimeMsgpack:             mimeMsgpack,
	"application/x-msgpack": mimeMsgpack,
}

type msgpackReplyKey struct{}

// negotiate records whether the reply to ctx is msgpack.
func negotiate(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Vary", "Accept")
	if prefersMsgpack(string(ctx.Request.Header.Peek("Accept"))) {
		ctx.SetUserValue(msgpackReplyKey{}, true)
	}
}

// prefersMsgpack reports whether an Accept header ranks msgpack above JSON:
// by q value, then by how specific the matching range is.
func prefersMsgpack(accept string) bool {
	if accept == "" {
		return false
	}
	type rank struct {
		q           float64
		specificity int
	}
	var js, mp rank
	better := func(r *rank, q float64, spec int) {
		if q > r.q || q == r.q && spec > r.specificity {
			*r = rank{q, spec}
		}
	}
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(s, 64); err != nil || q < 0 || q > 1 {
				continue
			}
		}
		switch mt {
		case "application/*":
			better(&js, q, 1)
			better(&mp, q, 1)
		case "*/*":
			better(&js, q, 0)
			better(&mp, q, 0)
		default:
			switch bodyMedia[mt] { // the same names, aliases included, as a request body
			case mimeJSON:
				better(&js, q, 2)
			case mimeMsgpack:
				better(&mp, q, 2)
			}
		}
	}
	return mp.q > 0 && (mp.q > js.q || mp.q == js.q && mp.specificity > js.specificity)
}

// readBody leaves a POST's body as JSON whatever it was sent as; a body in
// a media type we do not take is refused.
func readBody(ctx *fasthttp.RequestCtx) error {
	ct := string(ctx.Request.Header.ContentType())
	mt, _, err := mime.ParseMediaType(ct)
	media, ok := bodyMedia[mt]
	if err != nil || !ok {
		return &protocol.Error{Code: codeMediaType, Message: fmt.Sprintf("Content-Type must be %s or %s, not %q", mimeJSON, mimeMsgpack, ct)}
	}
	if media == mimeMsgpack && len(ctx.PostBody()) > 0 {
		js, err := codec.ToJSON(ctx.PostBody())
		if err != nil {
			return &protocol.Error{Code: codeMalformedMsgpack, Message: err.Error()}
		}
		ctx.Request.SetBody(js)
	}
	return nil
}

// write answers with v in the negotiated format.
func write(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = fasthttp.StatusInternalServerError, []byte(`{"error":{"code":"internal_error","message":"could not encode the response"}}`)
	}
	if mp, _ := ctx.UserValue(msgpackReplyKey{}).(bool); mp {
		if m, err := codec.FromJSON(b); err == nil {
			ctx.SetStatusCode(status)
			ctx.SetContentType(mimeMsgpack)
			ctx.SetBody(m)
			return
		}
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType(mimeJSON)
	ctx.SetBody(b)
}
