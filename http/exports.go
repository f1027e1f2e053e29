package httpapi

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/persistence"
)

// createExport accepts a hub export: 202 for a new one (it uploads in the
// background; poll GET /v1/training/exports/{id}), 200 for a repeat of its
// request_id.
func (s *Server) createExport(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	id, err := pathID(ctx, "run_id", protocol.RunPrefix, "run")
	if err != nil {
		return err
	}
	if field := carriesToken(ctx.PostBody()); field != "" {
		return &protocol.Error{Code: protocol.CodeTokenRefused, Message: fmt.Sprintf(
			"%s: tokens are never accepted in requests; register the hub token with `wts credentials add` and send its credential_id", field)}
	}
	var b exportBody
	body, err := decodeBody(ctx, &b)
	if err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	req := b.request(t, id)
	req.BodyHash = bodyHash(body)
	out, isNew, err := s.sys.CreateExport(req)
	if err != nil {
		return err
	}
	status := fasthttp.StatusOK
	if isNew {
		status = fasthttp.StatusAccepted
	}
	write(ctx, status, exportOf(out))
	return nil
}
