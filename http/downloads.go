package httpapi

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/persistence"
)

// Signed links: their lifetime bounds, and the codes of a link refused.
const (
	defaultLinkTTL = time.Hour
	minLinkTTL     = time.Minute
	maxLinkTTL     = 7 * 24 * time.Hour

	codeLinkExpired = "link_expired"
	codeLinkInvalid = "link_invalid"
)

// downloadBody asks for signed links to an artifact's files.
type downloadBody struct {
	ExpiresInS *int64  `json:"expires_in_s"`
	Format     *string `json:"format"`
}

// downloadLinks answers it: one link per file, all ending at ExpiresAt.
type downloadLinks struct {
	ArtifactID string         `json:"artifact_id"`
	Format     string         `json:"format"`
	ExpiresAt  time.Time      `json:"expires_at"`
	Files      []downloadFile `json:"files"`
}

type downloadFile struct {
	persistence.ArtifactFile
	URL string `json:"url"`
}

// filePath is the path of a file's signed link; the signature covers it.
func filePath(artifactID, format, name string) string {
	return fmt.Sprintf("/v1/files/%s/%s/%s", artifactID, format, name)
}

func (s *Server) downloadLinks(ctx *fasthttp.RequestCtx, t persistence.Tenant) error {
	id, err := pathID(ctx, "artifact_id", "", "artifact")
	if err != nil {
		return err
	}
	var b downloadBody
	if _, err := decodeBody(ctx, &b); err != nil {
		return err
	}
	ttl := defaultLinkTTL
	if b.ExpiresInS != nil {
		if ttl = time.Duration(*b.ExpiresInS) * time.Second; ttl < minLinkTTL || ttl > maxLinkTTL {
			return &invalid{Field: "expires_in_s", Reason: fmt.Sprintf("must be %d to %d", int(minLinkTTL.Seconds()), int(maxLinkTTL.Seconds()))}
		}
	}
	format := or(b.Format, protocol.FormatPEFT)
	if format != protocol.FormatPEFT && format != protocol.FormatMerged {
		return &invalid{Field: "format", Reason: fmt.Sprintf("must be %q or %q", protocol.FormatPEFT, protocol.FormatMerged)}
	}
	_, files, err := s.sys.Downloadable(t, id, format)
	if err != nil {
		return err
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	out := downloadLinks{ArtifactID: id, Format: format, ExpiresAt: exp.UTC(), Files: []downloadFile{}}
	origin := fmt.Sprintf("%s://%s", ctx.URI().Scheme(), ctx.Host())
	for _, f := range files {
		path := filePath(id, format, f.Path)
		url := fmt.Sprintf("%s%s?expires=%d&signature=%s", origin, path, exp.Unix(), s.signer.Sign(path, exp))
		out.Files = append(out.Files, downloadFile{f, url})
	}
	write(ctx, fasthttp.StatusOK, out)
	return nil
}

// serveFile answers a signed link, with byte ranges. The link is its own
// credential: no key is asked for.
func (s *Server) serveFile(ctx *fasthttp.RequestCtx) {
	id, _ := ctx.UserValue("artifact_id").(string)
	format, _ := ctx.UserValue("format").(string)
	name, _ := ctx.UserValue("name").(string)
	q := ctx.QueryArgs()
	err := s.signer.Verify(filePath(id, format, name), string(q.Peek("expires")), string(q.Peek("signature")), time.Now())
	switch {
	case errors.Is(err, persistence.ErrExpired):
		fail(ctx, codeLinkExpired, "the link has expired; ask for a new one")
		return
	case err != nil:
		fail(ctx, codeLinkInvalid, "the link's signature does not match its path and expiry")
		return
	}
	path, err := s.sys.FilePath(id, format, name)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Content-Disposition", "attachment; filename="+strconv.Quote(name))
	ctx.Request.SetRequestURI(path)
	s.files(ctx)
	// The file server answers its own errors in plain text: every error
	// here is the envelope.
	switch status := ctx.Response.StatusCode(); {
	case status == fasthttp.StatusRequestedRangeNotSatisfiable:
		ctx.Response.Header.Del("Content-Disposition")
		fail(ctx, codeRange, fmt.Sprintf("the Range header %q asks for bytes outside the file", ctx.Request.Header.Peek("Range")))
	case status == fasthttp.StatusNotFound:
		ctx.Response.Header.Del("Content-Disposition")
		fail(ctx, protocol.CodeNotFound, "the file is gone")
	case status >= 400:
		ctx.Response.Header.Del("Content-Disposition")
		s.log.Error("file server", "request_id", requestID(ctx), "status", status)
		fail(ctx, protocol.CodeInternal, "internal error")
	}
}

// newFileHandler serves files by absolute path, with byte ranges and
// without compressed copies (which fasthttp would write beside them).
func newFileHandler() fasthttp.RequestHandler {
	fs := &fasthttp.FS{Root: "/", AcceptByteRange: true, SkipCache: true}
	return fs.NewRequestHandler()
}
