package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
)

// pathID reads a path parameter and checks its pattern (an empty prefix
// means a UUID); an id that cannot exist is not found.
func pathID(ctx *fasthttp.RequestCtx, name, prefix, what string) (string, error) {
	id, _ := ctx.UserValue(name).(string)
	if prefix == "" && !payload.IsUUID(id) {
		return "", &protocol.Error{Code: protocol.CodeNotFound, Message: fmt.Sprintf("%s %q not found (ids are lowercase UUIDs)", what, id)}
	}
	if prefix != "" && !payload.IsID(prefix, id) {
		return "", &protocol.Error{Code: protocol.CodeNotFound, Message: fmt.Sprintf("%s %q not found (ids look like %s<32 hex digits>)", what, id, prefix)}
	}
	return id, nil
}

// created answers 201 for a new resource and 200 for an idempotent repeat.
func created(ctx *fasthttp.RequestCtx, isNew bool, v any) {
	status := fasthttp.StatusOK
	if isNew {
		status = fasthttp.StatusCreated
	}
	write(ctx, status, v)
}

// byID answers GET of one resource by the id in path parameter param.
func byID[T any](param, prefix, what string, read func(persistence.Tenant, string) (*T, error)) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		id, err := pathID(ctx, param, prefix, what)
		if err != nil {
			return err
		}
		v, err := read(t, id)
		if err != nil {
			return err
		}
		write(ctx, fasthttp.StatusOK, v)
		return nil
	}
}

func (s *Server) createSession(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	var b sessionBody
	body, err := decodeBody(ctx, &b)
	if err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	req := b.request(t)
	req.BodyHash = bodyHash(body)
	sess, isNew, err := s.sys.CreateSession(req)
	if err != nil {
		return err
	}
	created(ctx, isNew, sessionOf(sess))
	return nil
}

// requestTarget reads the path id and the body of an action on one
// resource that carries only a request_id (heartbeat, close, finish,
// cancel, retire). Whether the resource is the caller's is its grain's
// check.
func requestTarget(ctx *fasthttp.RequestCtx, param, prefix, what string) (id, requestID string, err error) {
	if id, err = pathID(ctx, param, prefix, what); err != nil {
		return "", "", err
	}
	var b requestBody
	if _, err := decodeBody(ctx, &b); err != nil {
		return "", "", err
	}
	if err := b.check(); err != nil {
		return "", "", err
	}
	return id, *b.RequestID, nil
}

// sessionAction is heartbeat and close: the session after the action.
func (s *Server) sessionAction(act func(persistence.Tenant, string) (*protocol.Session, error)) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		id, _, err := requestTarget(ctx, "session_id", protocol.SessionPrefix, "session")
		if err != nil {
			return err
		}
		sess, err := act(t, id)
		if err != nil {
			return err
		}
		write(ctx, fasthttp.StatusOK, sessionOf(sess))
		return nil
	}
}

func (s *Server) createRun(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	id, err := pathID(ctx, "session_id", protocol.SessionPrefix, "session")
	if err != nil {
		return err
	}
	var b runBody
	body, err := decodeBody(ctx, &b)
	if err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	req := b.request(t, id)
	req.BodyHash = bodyHash(body)
	r, err := s.sys.CreateRun(req)
	if err != nil {
		return err
	}
	created(ctx, r.Created, runOf(&r.Run))
	return nil
}

// submitTo answers an operation submission to the run or sampler in path
// parameter param: 202 with the durable operation handle.
func submitTo(param, prefix, what string, kinds []string, submit func(protocol.Submission) (*protocol.Accepted, error)) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		id, err := pathID(ctx, param, prefix, what)
		if err != nil {
			return err
		}
		var b opBody
		body, err := decodeBody(ctx, &b)
		if err != nil {
			return err
		}
		if err := b.check(kinds); err != nil {
			return err
		}
		canon, err := jcs.Canonical(body, "request_hash")
		if err != nil {
			return &protocol.Error{Code: codeMalformed, Message: err.Error()}
		}
		if want := sha256Hex(canon); want != *b.RequestHash {
			return &protocol.Error{Code: codeHashMismatch, Message: fmt.Sprintf(
				"request_hash is not the SHA-256 of the RFC 8785 canonical JSON of the body without request_hash (the server computed %s)", want)}
		}
		acc, err := submit(protocol.Submission{Tenant: t, Target: id, SeqID: *b.SeqID, IdempotencyKey: *b.IdempotencyKey,
			RequestHash: *b.RequestHash, Kind: *b.Kind, Payload: b.Payload})
		if err != nil {
			return err
		}
		write(ctx, fasthttp.StatusAccepted, operationOf(&acc.Op))
		return nil
	}
}

// control is finish and cancel: 202 with the operation that records the
// request.
func (s *Server) control(act func(persistence.Tenant, string, string) (*protocol.Accepted, error)) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		id, requestID, err := requestTarget(ctx, "run_id", protocol.RunPrefix, "run")
		if err != nil {
			return err
		}
		acc, err := act(t, id, requestID)
		if err != nil {
			return err
		}
		write(ctx, fasthttp.StatusAccepted, operationOf(&acc.Op))
		return nil
	}
}

// cancelOperation cancels one sampler operation (see
// actors.System.CancelOperation); the answer is the operation as it is
// then: cancelled, or executing until its next decoding step.
func (s *Server) cancelOperation(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	id, _, err := requestTarget(ctx, "operation_id", protocol.OperationPrefix, "operation")
	if err != nil {
		return err
	}
	op, err := s.sys.CancelOperation(t, id)
	if err != nil {
		return err
	}
	write(ctx, fasthttp.StatusAccepted, operationOf(op))
	return nil
}

// retire answers retire with the run's retire reply.
func (s *Server) retire(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	id, requestID, err := requestTarget(ctx, "run_id", protocol.RunPrefix, "run")
	if err != nil {
		return err
	}
	out, err := s.sys.Retire(t, id, requestID)
	if err != nil {
		return err
	}
	write(ctx, fasthttp.StatusOK, out)
	return nil
}

// DefaultLimit is the page size when limit is not given.
const DefaultLimit = 100

// paging reads the after_seq and limit query parameters; unknown
// parameters are refused like unknown body fields.
func paging(ctx *fasthttp.RequestCtx) (after int64, limit int, err error) {
	_, limit, err = pageArgs(ctx, "after_seq", func(v string) (err error) {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return errors.New("must be an integer >= 0")
		}
		return nil
	})
	return after, limit, err
}

// pageArgs reads a listing's query: its cursor, named cursor and checked
// by check, and its limit (DefaultLimit when absent).
func pageArgs(ctx *fasthttp.RequestCtx, cursor string, check func(string) error) (after string, limit int, err error) {
	limit = DefaultLimit
	ctx.QueryArgs().VisitAll(func(k, v []byte) {
		if err != nil {
			return
		}
		switch string(k) {
		case cursor:
			after = string(v)
			if cerr := check(after); cerr != nil {
				err = &invalid{Field: cursor, Reason: cerr.Error()}
			}
		case "limit":
			n, perr := strconv.Atoi(string(v))
			if perr != nil || n < 1 || n > 500 {
				err = &invalid{Field: "limit", Reason: "must be an integer between 1 and 500"}
			}
			limit = n
		default:
			err = &invalid{Field: string(k), Reason: fmt.Sprintf("unknown query parameter (want %s, limit)", cursor)}
		}
	})
	return after, limit, err
}

// listOf answers a listing of the caller's sessions or runs (prefix is
// their ids'), newest first, paged by after (the last id of the previous
// page) and limit.
func listOf[T, V any](prefix string, list func(persistence.Tenant, string, int) (*actors.Listing[T], error), view func(*T) V) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		after, limit, err := pageArgs(ctx, "after", func(v string) error {
			if !payload.IsID(prefix, v) {
				return fmt.Errorf("must be an id like %s<32 hex digits>: the previous page's next_after", prefix)
			}
			return nil
		})
		if err != nil {
			return err
		}
		l, err := list(t, after, limit)
		if err != nil {
			return err
		}
		p := listedPage[V]{Items: make([]V, len(l.Items))}
		for i := range l.Items {
			p.Items[i] = view(&l.Items[i])
		}
		if l.NextAfter != "" {
			p.NextAfter = &l.NextAfter
		}
		write(ctx, fasthttp.StatusOK, p)
		return nil
	}
}

// listedPage is a page of the caller's sessions or runs.
type listedPage[V any] struct {
	Items     []V     `json:"items"`
	NextAfter *string `json:"next_after"`
}

// runPage answers a run's paged listing (after_seq, limit) of records
// keyed by seq_id.
func runPage[P any](list func(persistence.Tenant, string, int64, int) (P, error)) authed {
	return ownerPage("run_id", protocol.RunPrefix, "run", list)
}

// ownerPage answers a paged listing (after_seq, limit) of the records of
// the run or sampler in path parameter param.
func ownerPage[P any](param, prefix, what string, list func(persistence.Tenant, string, int64, int) (P, error)) authed {
	return func(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
		id, err := pathID(ctx, param, prefix, what)
		if err != nil {
			return err
		}
		after, limit, err := paging(ctx)
		if err != nil {
			return err
		}
		p, err := list(t, id, after, limit)
		if err != nil {
			return err
		}
		write(ctx, fasthttp.StatusOK, p)
		return nil
	}
}

// offers answers the providers' capability rows and their room now.
func (s *Server) offers(ctx *fasthttp.RequestCtx, _ persistence.Tenant) error {
	list, err := s.sys.Offers()
	if err != nil {
		return err
	}
	write(ctx, fasthttp.StatusOK, offersOf(list))
	return nil
}

// models answers the model catalog: what a run's base_model and
// model_revision may name, and which providers offer each.
func (s *Server) models(ctx *fasthttp.RequestCtx, _ persistence.Tenant) error {
	write(ctx, fasthttp.StatusOK, modelsOf(s.sys.Registry()))
	return nil
}

// tokenizer answers a catalog model's Hugging Face tokenizer.json, for
// the clients to turn text into token ids and back.
func (s *Server) tokenizer(ctx *fasthttp.RequestCtx, _ persistence.Tenant) error {
	name, _ := ctx.UserValue("model").(string)
	m, ok := s.sys.Registry().Catalog().Lookup(name)
	if !ok || !m.Tokenizer {
		return protocol.Refuse(protocol.CodeNotFound, "model %q has no tokenizer.json in the catalog (GET /v1/training/models says which do)", name)
	}
	raw, err := os.ReadFile(filepath.Join(m.Dir, providers.TokenizerFile))
	if err != nil {
		return fmt.Errorf("read %s's tokenizer: %w", name, err)
	}
	write(ctx, fasthttp.StatusOK, json.RawMessage(raw))
	return nil
}

// ledger answers the caller's organization's ledger, its entries paged by
// after_seq and limit.
func (s *Server) ledger(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	after, limit, err := paging(ctx)
	if err != nil {
		return err
	}
	st, err := s.sys.Ledger(t, after, limit)
	if err != nil {
		return err
	}
	write(ctx, fasthttp.StatusOK, ledgerOf(t, st))
	return nil
}

// usage lists a session's usage components.
func (s *Server) usage(t persistence.Tenant, sessionID string) (*usagePage, error) {
	items, err := s.sys.Usage(t, sessionID)
	if err != nil {
		return nil, err
	}
	return &usagePage{Items: usagesOf(items)}, nil
}
