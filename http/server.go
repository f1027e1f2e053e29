// Package httpapi serves the API over fasthttp: routing, authentication,
// strict request decoding, the error envelope, and one handler per endpoint.
// It never lets a fasthttp buffer escape a handler: bodies are copied before
// anything keeps them.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fasthttp/router"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/http/auth"
	"github.com/wts-project/wts/http/console"
	"github.com/wts-project/wts/persistence"
)

// DefaultMaxBody is the largest request body accepted: a forward_backward of
// 4096 datums of several hundred tokens with per-token weights fits.
const DefaultMaxBody = 64 << 20

// Config configures the server.
type Config struct {
	MaxBody int // bytes; 0 is DefaultMaxBody
	Log     *slog.Logger
	Signer  *persistence.Signer // signs and checks download links
}

// Server is the API server of one node.
type Server struct {
	sys      *actors.System
	log      *slog.Logger
	maxBody  int
	srv      *fasthttp.Server
	draining atomic.Bool
	signer   *persistence.Signer
	files    fasthttp.RequestHandler // serves signed downloads
	// prometheus serves the node's registry in the Prometheus text format.
	prometheus fasthttp.RequestHandler
	keys       *auth.Keys
}

// New builds the server over a started node.
func New(sys *actors.System, cfg Config) *Server {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{sys: sys, log: cfg.Log, maxBody: cfg.MaxBody, signer: cfg.Signer, files: newFileHandler(), keys: auth.NewKeys(sys.Store()),
		prometheus: fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(sys.Telemetry().Registry, promhttp.HandlerOpts{}))}
	s.srv = &fasthttp.Server{
		Handler:            s.routes(),
		Name:               "wts",
		MaxRequestBodySize: cfg.MaxBody,
		ReadTimeout:        5 * time.Minute,
		WriteTimeout:       5 * time.Minute,
		IdleTimeout:        2 * time.Minute,
		ErrorHandler:       s.transportError,
		Logger:             slogPrinter{cfg.Log},
	}
	return s
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown refuses new requests (503 shutting_down while connections close),
// waits for those in flight, and returns; the caller then stops the node.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	return s.srv.ShutdownWithContext(ctx)
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(format string, args ...any) {
	p.log.Warn(redact(fmt.Sprintf(format, args...)), "component", "fasthttp")
}

// secrets are what redact removes: an Authorization header's value, a
// bearer credential, and anything shaped like an API key.
var secrets = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)(authorization\s*:\s*)[^\r\n]*`), "${1}[redacted]"},
	{regexp.MustCompile(`(?i)(bearer\s+)[^\s"',;]+`), "${1}[redacted]"},
	{regexp.MustCompile(`svc_(test|live)_[A-Za-z0-9]*`), "svc_${1}_[redacted]"},
}

// redact removes secrets from text bound for a log line or a reply.
func redact(text string) string {
	for _, s := range secrets {
		text = s.re.ReplaceAllString(text, s.with)
	}
	return text
}

// transportError answers requests fasthttp could not read. They never
// reached logged, so they get their request id here; fasthttp's error
// quotes the raw request (an API key too), so neither the reply nor the
// log repeats it.
func (s *Server) transportError(ctx *fasthttp.RequestCtx, err error) {
	assignRequestID(ctx)
	negotiate(ctx)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		fail(ctx, codeTooLarge, fmt.Sprintf("request body is larger than %d bytes", s.maxBody))
	} else {
		fail(ctx, codeBadRequest, "could not read the request: its start line, headers or framing are malformed")
	}
	s.log.Warn("unreadable request", "request_id", requestID(ctx), "status", ctx.Response.StatusCode(), "err", redact(err.Error()))
}

// authed is a handler of an authenticated endpoint.
type authed func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error

func (s *Server) routes() fasthttp.RequestHandler { return s.logged(s.router().Handler) }

// router maps every endpoint to its handler; the OpenAPI document lists
// exactly these (a test holds the two together).
func (s *Server) router() *router.Router {
	r := router.New()
	r.RedirectTrailingSlash, r.RedirectFixedPath = false, false
	r.HandleOPTIONS = false
	r.SaveMatchedRoutePath = true // the route label of the request metrics
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		fail(ctx, protocol.CodeNotFound, fmt.Sprintf("no endpoint %s %s", ctx.Method(), ctx.Path()))
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		fail(ctx, codeMethod, fmt.Sprintf("%s is not allowed on %s (allowed: %s)", ctx.Method(), ctx.Path(), ctx.Response.Header.Peek("Allow")))
	}
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, v any) {
		s.log.Error("handler panic", "request_id", requestID(ctx), "panic", v)
		fail(ctx, protocol.CodeInternal, "internal error")
	}
	const v1 = "/v1/training"
	r.POST(v1+"/sessions", s.api(s.createSession))
	r.GET(v1+"/sessions/{session_id}", s.api(byID("session_id", protocol.SessionPrefix, "session", shown(s.sys.GetSession, sessionOf))))
	r.POST(v1+"/sessions/{session_id}/heartbeat", s.api(s.sessionAction(s.sys.Heartbeat)))
	r.POST(v1+"/sessions/{session_id}/close", s.api(s.sessionAction(s.sys.CloseSession)))
	r.POST(v1+"/sessions/{session_id}/runs", s.api(s.createRun))
	r.GET(v1+"/sessions/{session_id}/usage", s.api(byID("session_id", protocol.SessionPrefix, "session", s.usage)))
	r.GET(v1+"/sessions/{session_id}/cost", s.api(byID("session_id", protocol.SessionPrefix, "session", shown(s.sys.Cost, costOf))))
	r.GET("/v1/organization/ledger", s.api(s.ledger))
	r.GET(v1+"/capabilities", s.api(s.offers))
	r.GET(v1+"/models", s.api(s.models))
	r.GET(v1+"/models/{model}/tokenizer", s.api(s.tokenizer))
	r.GET(v1+"/sessions", s.api(listOf(protocol.SessionPrefix, s.sys.ListSessions, sessionOf)))
	r.GET(v1+"/runs", s.api(listOf(protocol.RunPrefix, s.sys.ListRuns, runOf)))
	r.GET(v1+"/runs/{run_id}", s.api(byID("run_id", protocol.RunPrefix, "run", shown(s.sys.GetRun, runOf))))
	r.POST(v1+"/runs/{run_id}/operations", s.api(submitTo("run_id", protocol.RunPrefix, "run", runKinds, s.sys.Submit)))
	r.POST(v1+"/samplers/{sampler_id}/operations", s.api(submitTo("sampler_id", protocol.SamplerPrefix, "sampler", samplerKinds, s.sys.SubmitToSampler)))
	r.GET(v1+"/samplers/{sampler_id}", s.api(byID("sampler_id", protocol.SamplerPrefix, "sampler", shown(s.sys.GetSampler, samplerOf))))
	r.GET(v1+"/samplers/{sampler_id}/operations", s.api(ownerPage("sampler_id", protocol.SamplerPrefix, "sampler", listed(s.sys.ListSamplerOperations, operationOf))))
	r.GET(v1+"/runs/{run_id}/operations", s.api(runPage(listed(s.sys.ListOperations, operationOf))))
	r.GET(v1+"/runs/{run_id}/checkpoints", s.api(runPage(listed(s.sys.ListCheckpoints, checkpointOf))))
	r.GET(v1+"/runs/{run_id}/artifacts", s.api(runPage(listed(s.sys.ListArtifacts, artifactOf))))
	r.GET(v1+"/checkpoints/{checkpoint_id}", s.api(byID("checkpoint_id", protocol.CheckpointPrefix, "checkpoint", shown(s.sys.GetCheckpoint, checkpointOf))))
	r.GET(v1+"/artifacts/{artifact_id}", s.api(byID("artifact_id", "", "artifact", shown(s.sys.GetArtifact, artifactOf))))
	r.POST(v1+"/artifacts/{artifact_id}/download_urls", s.api(s.downloadLinks))
	r.GET("/v1/files/{artifact_id}/{format}/{name}", s.serveFile)
	r.POST(v1+"/runs/{run_id}/finish", s.api(s.control(s.sys.Finish)))
	r.POST(v1+"/runs/{run_id}/cancel", s.api(s.control(s.sys.Cancel)))
	r.POST(v1+"/runs/{run_id}/retire", s.api(s.retire))
	r.POST(v1+"/runs/{run_id}/exports", s.api(s.createExport))
	r.GET(v1+"/exports/{export_id}", s.api(byID("export_id", protocol.ExportPrefix, "export", shown(s.sys.GetExport, exportOf))))
	r.GET(v1+"/runs/{run_id}/metrics", s.api(runPage(shownPage(s.sys.Metrics, metricsOf))))
	r.GET(v1+"/operations/{operation_id}", s.api(byID("operation_id", protocol.OperationPrefix, "operation", shown(s.sys.GetOperation, operationOf))))
	r.POST(v1+"/operations/{operation_id}/cancel", s.api(s.cancelOperation))
	for path := range console.Files {
		r.GET(path, console.Serve)
	}
	r.GET("/healthz", func(ctx *fasthttp.RequestCtx) { write(ctx, 200, map[string]string{"status": "ok"}) })
	r.GET("/readyz", s.ready)
	r.GET("/metrics", func(ctx *fasthttp.RequestCtx) { s.prometheus(ctx) })
	r.GET("/v1/openapi.json", func(ctx *fasthttp.RequestCtx) { write(ctx, 200, json.RawMessage(OpenAPI())) })
	return r
}

// logged assigns the request id, refuses requests while draining, and logs
// each request once it is answered.
func (s *Server) logged(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		id := assignRequestID(ctx)
		negotiate(ctx)
		if s.draining.Load() {
			ctx.SetConnectionClose()
			fail(ctx, codeShuttingDown, "the server is shutting down; retry on another node or after restart")
		} else {
			next(ctx)
		}
		took := time.Since(start)
		route, _ := ctx.UserValue(router.MatchedRoutePathParam).(string)
		if route == "" {
			route = "unmatched" // one label for every unknown path, however many there are
		}
		s.sys.Telemetry().Request(route, methodLabel(ctx), ctx.Response.StatusCode(), took)
		s.log.Info("request", "request_id", id, "method", string(ctx.Method()), "path", string(ctx.Path()),
			"status", ctx.Response.StatusCode(), "ms", float64(took.Microseconds())/1000)
	}
}

// methodLabel is the request's method, or "other" for one outside HTTP's
// usual set, so that a client cannot grow the metrics without bound.
func methodLabel(ctx *fasthttp.RequestCtx) string {
	switch m := string(ctx.Method()); m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		return m
	}
	return "other"
}

type requestIDKey struct{}

// assignRequestID gives the request its id: the caller's X-Request-Id (up
// to 200 printable ASCII characters), or one made here; it is echoed in the
// reply's header.
func assignRequestID(ctx *fasthttp.RequestCtx) string {
	id := string(ctx.Request.Header.Peek("X-Request-Id"))
	if id == "" || len(id) > 200 || strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		var b [12]byte
		rand.Read(b[:])
		id = "req_" + hex.EncodeToString(b[:])
	}
	ctx.SetUserValue(requestIDKey{}, id)
	ctx.Response.Header.Set("X-Request-Id", id)
	return id
}

func requestID(ctx *fasthttp.RequestCtx) string {
	id, _ := ctx.UserValue(requestIDKey{}).(string)
	return id
}

// api wraps an authenticated endpoint: the bearer key, the content type of a
// body, and the error envelope for whatever the handler returns.
func (s *Server) api(h authed) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		// The scheme is case-insensitive (RFC 7235): "bearer" is Bearer.
		scheme, key, ok := strings.Cut(string(ctx.Request.Header.Peek("Authorization")), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="wts"`)
			fail(ctx, codeUnauthorized, "missing Authorization: Bearer <API key> header")
			return
		}
		t, err := s.keys.Check(strings.TrimSpace(key))
		if err != nil {
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="wts", error="invalid_token"`)
			if errors.Is(err, auth.ErrInvalid) {
				fail(ctx, codeUnauthorized, "the API key is not valid")
			} else {
				s.log.Error("key check", "request_id", requestID(ctx), "err", err)
				fail(ctx, protocol.CodeInternal, "internal error")
			}
			return
		}
		if ctx.IsPost() {
			if err := readBody(ctx); err != nil {
				s.fail(ctx, err)
				return
			}
		}
		if err := h(ctx, t); err != nil {
			s.fail(ctx, err)
		}
	}
}

// fail answers with err's envelope; schema errors are validation_error and
// anything without a public code is logged and answered internal_error.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) {
	var inv *payload.Invalid
	var mal *payload.Malformed
	switch {
	case errors.As(err, &mal):
		fail(ctx, codeMalformed, mal.Error())
	case errors.As(err, &inv):
		fail(ctx, protocol.CodeValidation, inv.Error())
	default:
		if e := protocol.AsError(err); e.Code == protocol.CodeInternal {
			s.log.Error("request failed", "request_id", requestID(ctx), "err", err)
		}
		failErr(ctx, err)
	}
}

func (s *Server) ready(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		fail(ctx, codeShuttingDown, "draining")
		return
	}
	if err := s.sys.Store().View(func(persistence.Tx) error { return nil }); err != nil {
		fail(ctx, protocol.CodeUnavailable, "store: "+err.Error())
		return
	}
	write(ctx, 200, map[string]string{"status": "ready"})
}

// decodeBody copies the request body and strictly decodes it into v: with
// v's plain decoder when it has one and the body suits it, else Strict.
func decodeBody(ctx *fasthttp.RequestCtx, v any) ([]byte, error) {
	body := append([]byte(nil), ctx.PostBody()...)
	if len(body) == 0 {
		return nil, &payload.Malformed{Reason: "the request body is empty; send a JSON object"}
	}
	if p, ok := v.(plainDecoder); ok && p.decodePlain(body) {
		return body, nil
	}
	return body, payload.Strict(body, v, "")
}

// plainDecoder is a body that decodes scan's plain shape itself (see
// scan.Scanner), without reflection. decodePlain returns false for any
// other input, leaving the body zero for Strict.
type plainDecoder interface {
	decodePlain(body []byte) bool
}
