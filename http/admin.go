package httpapi

import (
	"net"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/http/auth"
)

// The admin surface serves operators on the node's own machine: a unix
// socket in the data folder, readable only by the service's user (the
// folder's owner), never a TCP port. Its one endpoint issues API keys while
// the node runs, when the store is locked to anyone else.

// AdminSocket is the admin socket's name inside the data folder.
const AdminSocket = "admin.sock"

// KeyRequest asks the admin socket for a key.
type KeyRequest struct {
	Org  string `json:"org"`
	Live bool   `json:"live"`
}

// KeyReply carries the new key, shown once.
type KeyReply struct {
	Key string `json:"key"`
}

// ServeAdmin answers POST /admin/keys on ln until it is closed.
func ServeAdmin(sys *actors.System, ln net.Listener) error {
	srv := &fasthttp.Server{Name: "wts-admin", ReadTimeout: 10 * time.Second, Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/admin/keys" || !ctx.IsPost() {
			fail(ctx, actors.CodeNotFound, "the admin socket serves POST /admin/keys")
			return
		}
		var req KeyRequest
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Org == "" {
			fail(ctx, actors.CodeValidation, `want {"org": NAME, "live": BOOL}`)
			return
		}
		key, err := auth.Create(sys.Store(), req.Org, req.Live, time.Now())
		if err != nil {
			failErr(ctx, err)
			return
		}
		write(ctx, fasthttp.StatusCreated, KeyReply{Key: key})
	}}
	return srv.Serve(ln)
}

// RequestKey asks a running node's admin socket for a key.
func RequestKey(socket string, req KeyRequest) (string, error) {
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return net.Dial("unix", socket) }}
	body, _ := json.Marshal(req)
	r, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(r)
	defer fasthttp.ReleaseResponse(resp)
	r.SetRequestURI("http://admin/admin/keys")
	r.Header.SetMethod("POST")
	r.Header.SetContentType(mimeJSON)
	r.SetBody(body)
	if err := c.DoTimeout(r, resp, 10*time.Second); err != nil {
		return "", err
	}
	var out KeyReply
	if resp.StatusCode() != fasthttp.StatusCreated || json.Unmarshal(resp.Body(), &out) != nil {
		return "", &actors.Error{Code: actors.CodeInternal, Message: "admin socket answered " + string(resp.Body())}
	}
	return out.Key, nil
}
