// Package hub publishes a folder to a model repository on a Hugging Face Hub
// (huggingface.co, or any endpoint that speaks its protocol) the way the
// Hub's own clients do: create the repository, ask which files go through
// LFS (preupload), send those to LFS storage (the git-lfs batch API, basic
// transfer), and record every file in one NDJSON commit.
package hub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// DefaultEndpoint is the public Hub.
const DefaultEndpoint = "https://huggingface.co"

// Client talks to one Hub endpoint with one token.
type Client struct {
	Endpoint string
	Token    string
	HTTP     *http.Client
}

// File is one file to publish: its path in the repository, where it is on
// disk, its size and its SHA-256 (hex).
type File struct {
	Path   string
	Local  string
	Size   int64
	SHA256 string
}

// Error is a refusal from the Hub, with the service's code for it.
type Error struct {
	Status  int
	Code    string // hub_unauthorized, hub_not_found or hub_error
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("hub: %d %s", e.Status, e.Message) }

// Codes an export can fail with.
const (
	CodeUnauthorized = "hub_unauthorized"
	CodeNotFound     = "hub_not_found"
	CodeFailed       = "hub_error"
	CodeUnreachable  = "hub_unreachable"
)

// CodeOf is the code of an error from the client: the Hub's refusal, or
// hub_unreachable when no answer came; "" for anything else.
func CodeOf(err error) string {
	var e *Error
	var ue *url.Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.As(err, &ue):
		return CodeUnreachable
	}
	return ""
}

// call sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, u, contentType string, body io.Reader, out any, ok ...int) error {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Accept", strings.Replace(contentType, "x-ndjson", "json", 1))
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		for _, s := range ok {
			if resp.StatusCode == s {
				return nil
			}
		}
		e := &Error{Status: resp.StatusCode, Code: CodeFailed, Message: strings.TrimSpace(string(raw))}
		var msg struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &msg) == nil && msg.Error != "" {
			e.Message = msg.Error
		}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			e.Code = CodeUnauthorized
		case http.StatusNotFound:
			e.Code = CodeNotFound
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("hub: %s %s answered %q: %w", method, u, raw, err)
		}
	}
	return nil
}

// do sends a request. The token goes only to the Hub's own endpoint, and
// only when the request carries no authorization of its own (an LFS
// action's headers may).
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.Token != "" && req.Header.Get("Authorization") == "" && sameOrigin(req.URL, c.Endpoint) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// sameOrigin reports whether u is on the endpoint's scheme and host (a
// prefix test would also match hub.example.com.elsewhere.net).
func sameOrigin(u *url.URL, endpoint string) bool {
	e, err := url.Parse(endpoint)
	return err == nil && u.Scheme == e.Scheme && u.Host == e.Host
}

func jsonBody(v any) io.Reader {
	raw, _ := json.Marshal(v)
	return bytes.NewReader(raw)
}

// CreateRepo creates the model repository owner/name; one that exists is
// fine (the token must still be able to write to it, which the upload
// shows).
func (c *Client) CreateRepo(ctx context.Context, repo string, private bool) error {
	owner, name, _ := strings.Cut(repo, "/")
	visibility := "public"
	if private {
		visibility = "private"
	}
	return c.call(ctx, "POST", c.Endpoint+"/api/repos/create", "application/json",
		jsonBody(map[string]any{"name": name, "organization": owner, "type": "model", "visibility": visibility}), nil, http.StatusConflict)
}

// CreateBranch makes branch (from main) unless it exists.
func (c *Client) CreateBranch(ctx context.Context, repo, branch string) error {
	return c.call(ctx, "POST", fmt.Sprintf("%s/api/models/%s/branch/%s", c.Endpoint, repo, url.PathEscape(branch)), "application/json",
		jsonBody(map[string]any{}), nil, http.StatusConflict)
}

// Upload commits files to branch of repo and returns the commit's id.
func (c *Client) Upload(ctx context.Context, repo, branch, summary string, files []File) (string, error) {
	modes, err := c.preupload(ctx, repo, branch, files)
	if err != nil {
		return "", err
	}
	var lfs []File
	for _, f := range files {
		if modes[f.Path] == "lfs" {
			lfs = append(lfs, f)
		}
	}
	if err := c.uploadLFS(ctx, repo, branch, lfs); err != nil {
		return "", err
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.Encode(map[string]any{"key": "header", "value": map[string]any{"summary": summary, "description": ""}})
	for _, f := range files {
		if modes[f.Path] == "lfs" {
			enc.Encode(map[string]any{"key": "lfsFile", "value": map[string]any{"path": f.Path, "algo": "sha256", "oid": f.SHA256, "size": f.Size}})
			continue
		}
		raw, err := os.ReadFile(f.Local)
		if err != nil {
			return "", err
		}
		enc.Encode(map[string]any{"key": "file", "value": map[string]any{"path": f.Path, "encoding": "base64", "content": base64.StdEncoding.EncodeToString(raw)}})
	}
	var out struct {
		CommitOID string `json:"commitOid"`
	}
	err = c.call(ctx, "POST", fmt.Sprintf("%s/api/models/%s/commit/%s", c.Endpoint, repo, url.PathEscape(branch)), "application/x-ndjson", &body, &out)
	return out.CommitOID, err
}

// preupload asks the Hub how each file is to be sent: "lfs" or "regular".
func (c *Client) preupload(ctx context.Context, repo, branch string, files []File) (map[string]string, error) {
	type entry struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		Sample string `json:"sample"`
	}
	var req struct {
		Files []entry `json:"files"`
	}
	for _, f := range files {
		sample := make([]byte, 512)
		fh, err := os.Open(f.Local)
		if err != nil {
			return nil, err
		}
		n, _ := io.ReadFull(fh, sample)
		fh.Close()
		req.Files = append(req.Files, entry{f.Path, f.Size, base64.StdEncoding.EncodeToString(sample[:n])})
	}
	var out struct {
		Files []struct {
			Path       string `json:"path"`
			UploadMode string `json:"uploadMode"`
		} `json:"files"`
	}
	if err := c.call(ctx, "POST", fmt.Sprintf("%s/api/models/%s/preupload/%s", c.Endpoint, repo, url.PathEscape(branch)), "application/json", jsonBody(req), &out); err != nil {
		return nil, err
	}
	modes := map[string]string{}
	for _, f := range out.Files {
		modes[f.Path] = f.UploadMode
	}
	return modes, nil
}

// action is one step the LFS batch API hands out.
type action struct {
	Href   string            `json:"href"`
	Header map[string]string `json:"header"`
}

// uploadLFS sends files to LFS storage: the batch API says, per object,
// where to PUT it (nothing when it is already stored) and where to confirm.
func (c *Client) uploadLFS(ctx context.Context, repo, branch string, files []File) error {
	if len(files) == 0 {
		return nil
	}
	type object struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	}
	req := map[string]any{"operation": "upload", "transfers": []string{"basic"}, "hash_algo": "sha_256", "ref": map[string]string{"name": branch}}
	var objects []object
	byOID := map[string]File{}
	for _, f := range files {
		objects = append(objects, object{f.SHA256, f.Size})
		byOID[f.SHA256] = f
	}
	req["objects"] = objects
	var out struct {
		Objects []struct {
			OID     string             `json:"oid"`
			Size    int64              `json:"size"`
			Actions map[string]*action `json:"actions"`
			Error   *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"objects"`
	}
	if err := c.call(ctx, "POST", fmt.Sprintf("%s/%s.git/info/lfs/objects/batch", c.Endpoint, repo), "application/vnd.git-lfs+json", jsonBody(req), &out); err != nil {
		return err
	}
	for _, o := range out.Objects {
		f, ok := byOID[o.OID]
		switch {
		case !ok:
			return &Error{Status: 200, Code: CodeFailed, Message: "LFS batch answered an object that was not asked for: " + o.OID}
		case o.Error != nil:
			return &Error{Status: o.Error.Code, Code: CodeFailed, Message: fmt.Sprintf("LFS batch refused %s: %s", f.Path, o.Error.Message)}
		case o.Actions["upload"] == nil:
			continue // already stored
		}
		if err := c.put(ctx, o.Actions["upload"], f); err != nil {
			return err
		}
		if v := o.Actions["verify"]; v != nil {
			if err := c.send(ctx, "POST", v, "application/vnd.git-lfs+json", jsonBody(object{o.OID, o.Size}), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Client) put(ctx context.Context, a *action, f File) error {
	fh, err := os.Open(f.Local)
	if err != nil {
		return err
	}
	defer fh.Close()
	return c.send(ctx, "PUT", a, "", fh, f.Size)
}

// send follows an LFS action: its href with its headers (which carry their
// own authorization, if any). A body of known size is sent with its length,
// as object stores require.
func (c *Client) send(ctx context.Context, method string, a *action, contentType string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, method, a.Href, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	for k, v := range a.Header {
		req.Header.Set(k, v)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &Error{Status: resp.StatusCode, Code: CodeFailed, Message: fmt.Sprintf("LFS %s %s: %s", method, a.Href, raw)}
	}
	return nil
}
