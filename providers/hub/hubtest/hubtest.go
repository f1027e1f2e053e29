// Package hubtest is a Hugging Face Hub emulator for tests: the part of the
// Hub's HTTP protocol that publishing and downloading model files use,
// in memory, on 127.0.0.1. Its fidelity is checked by driving it with the
// official @huggingface/hub client (http/hub_test.go).
//
// It serves repository creation, branches, preupload, the git-lfs batch API
// with basic transfer (uploads it stores and verifies by SHA-256), NDJSON
// commits, repository info, and resolve (downloads with byte ranges).
// Private repositories answer only their owner's token.
package hubtest

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Hub is a running emulator.
type Hub struct {
	*httptest.Server
	mu     sync.Mutex
	tokens map[string]string // token → user name
	repos  map[string]*repo  // "owner/name" → repo
	lfs    map[string][]byte // oid → content
}

type repo struct {
	owner    string
	private  bool
	branches map[string]*commit
}

// commit is one state of a branch: path → content, and for LFS files the
// oid they point at.
type commit struct {
	id    string
	files map[string][]byte
	lfs   map[string]string
}

// New starts an emulator whose tokens map token → user name; a user may
// create repositories under its own name only.
func New(tokens map[string]string) *Hub {
	h := &Hub{tokens: tokens, repos: map[string]*repo{}, lfs: map[string][]byte{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

// File returns a file of repo at branch, and whether it is stored in LFS.
func (h *Hub) File(repoID, branch, path string) ([]byte, bool, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repoID]
	if r == nil || r.branches[branch] == nil {
		return nil, false, false
	}
	c := r.branches[branch]
	b, ok := c.files[path]
	_, isLFS := c.lfs[path]
	return b, isLFS, ok
}

// Private reports whether repo exists and is private.
func (h *Hub) Private(repoID string) (exists, private bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repoID]
	return r != nil, r != nil && r.private
}

func fail(w http.ResponseWriter, status int, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusNotFound {
		w.Header().Set("X-Error-Code", "EntryNotFound")
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, a...)})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// user is the name the request's token belongs to ("" when none).
func (h *Hub) user(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return h.tokens[tok]
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := r.URL.Path
	switch {
	case r.Method == "POST" && p == "/api/repos/create":
		h.create(w, r)
	case strings.HasPrefix(p, "/api/models/"):
		h.api(w, r, strings.TrimPrefix(p, "/api/models/"))
	case r.Method == "POST" && strings.HasSuffix(p, ".git/info/lfs/objects/batch"):
		h.batch(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/"), ".git/info/lfs/objects/batch"))
	case r.Method == "PUT" && strings.HasPrefix(p, "/lfs/upload/"):
		h.store(w, r, strings.TrimPrefix(p, "/lfs/upload/"))
	case r.Method == "POST" && p == "/lfs/verify":
		h.verify(w, r)
	case (r.Method == "GET" || r.Method == "HEAD") && strings.Contains(p, "/resolve/"):
		h.resolve(w, r)
	default:
		fail(w, http.StatusNotFound, "no route %s %s", r.Method, p)
	}
}

func (h *Hub) create(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name         string `json:"name"`
		Organization string `json:"organization"`
		Type         string `json:"type"`
		Private      *bool  `json:"private"`
		Visibility   string `json:"visibility"`
	}
	user := h.user(r)
	if user == "" {
		fail(w, http.StatusUnauthorized, "invalid credentials")
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Name == "" || b.Type != "" && b.Type != "model" {
		fail(w, http.StatusBadRequest, "bad repo creation body")
		return
	}
	owner := b.Organization
	if owner == "" {
		owner = user
	}
	if owner != user {
		fail(w, http.StatusForbidden, "you cannot create repositories under %s", owner)
		return
	}
	id := owner + "/" + b.Name
	if h.repos[id] != nil {
		fail(w, http.StatusConflict, "You already created this model repo")
		return
	}
	private := b.Visibility == "private" || b.Private != nil && *b.Private
	h.repos[id] = &repo{owner: owner, private: private, branches: map[string]*commit{
		"main": {id: sha1hex([]byte("init " + id)), files: map[string][]byte{}, lfs: map[string]string{}}}}
	reply(w, map[string]string{"url": h.URL + "/" + id, "id": id, "name": id})
}

// find returns the repository named by the start of rest and what follows,
// checking the token: writers must own it, readers too when it is private.
func (h *Hub) find(w http.ResponseWriter, r *http.Request, rest string, write bool) (*repo, string, string, bool) {
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		fail(w, http.StatusNotFound, "Repository not found")
		return nil, "", "", false
	}
	id := parts[0] + "/" + parts[1]
	tail := ""
	if len(parts) == 3 {
		tail = parts[2]
	}
	rp := h.repos[id]
	user := h.user(r)
	if rp == nil || rp.private && user != rp.owner {
		fail(w, http.StatusNotFound, "Repository not found")
		return nil, "", "", false
	}
	if write && user != rp.owner {
		fail(w, http.StatusForbidden, "You don't have the rights to write to %s", id)
		return nil, "", "", false
	}
	return rp, id, tail, true
}

func (h *Hub) api(w http.ResponseWriter, r *http.Request, rest string) {
	rp, id, tail, ok := h.find(w, r, rest, r.Method == "POST")
	if !ok {
		return
	}
	verb, arg, _ := strings.Cut(tail, "/")
	switch {
	case r.Method == "GET" && tail == "":
		reply(w, map[string]any{"id": id, "private": rp.private, "sha": rp.branches["main"].id})
	case r.Method == "POST" && verb == "branch":
		if rp.branches[arg] != nil {
			fail(w, http.StatusConflict, "Reference already exists")
			return
		}
		rp.branches[arg] = rp.branches["main"]
		reply(w, map[string]any{})
	case r.Method == "POST" && verb == "preupload":
		h.preupload(w, r)
	case r.Method == "POST" && verb == "commit":
		h.commit(w, r, rp, id, arg)
	default:
		fail(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
}

// preupload says LFS for weights, large files and binary content, as the
// Hub's default .gitattributes and size rules do.
func (h *Hub) preupload(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Files []struct {
			Path   string `json:"path"`
			Size   int64  `json:"size"`
			Sample string `json:"sample"`
		} `json:"files"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		fail(w, http.StatusBadRequest, "bad preupload body")
		return
	}
	type mode struct {
		Path         string `json:"path"`
		UploadMode   string `json:"uploadMode"`
		ShouldIgnore bool   `json:"shouldIgnore"`
	}
	out := struct {
		Files []mode `json:"files"`
	}{Files: []mode{}}
	for _, f := range b.Files {
		sample, _ := base64.StdEncoding.DecodeString(f.Sample)
		m := "regular"
		if f.Size >= 10<<20 || bytes.IndexByte(sample, 0) >= 0 || strings.HasSuffix(f.Path, ".safetensors") || strings.HasSuffix(f.Path, ".bin") {
			m = "lfs"
		}
		out.Files = append(out.Files, mode{Path: f.Path, UploadMode: m})
	}
	reply(w, out)
}

func (h *Hub) batch(w http.ResponseWriter, r *http.Request, rest string) {
	if _, _, _, ok := h.find(w, r, rest, true); !ok {
		return
	}
	var b struct {
		Operation string `json:"operation"`
		Objects   []struct {
			OID  string `json:"oid"`
			Size int64  `json:"size"`
		} `json:"objects"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Operation != "upload" {
		fail(w, http.StatusBadRequest, "bad batch body")
		return
	}
	objects := []map[string]any{}
	for _, o := range b.Objects {
		obj := map[string]any{"oid": o.OID, "size": o.Size}
		if _, stored := h.lfs[o.OID]; !stored {
			obj["actions"] = map[string]any{
				"upload": map[string]any{"href": fmt.Sprintf("%s/lfs/upload/%s?size=%d", h.URL, o.OID, o.Size), "header": map[string]string{"X-Upload": "emulator"}},
				"verify": map[string]any{"href": h.URL + "/lfs/verify"},
			}
		}
		objects = append(objects, obj)
	}
	w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
	json.NewEncoder(w).Encode(map[string]any{"transfer": "basic", "objects": objects})
}

// store takes an LFS upload; its SHA-256 must be the oid it was sent to.
func (h *Hub) store(w http.ResponseWriter, r *http.Request, oid string) {
	body, err := io.ReadAll(r.Body)
	sum := sha256.Sum256(body)
	if err != nil || hex.EncodeToString(sum[:]) != oid || fmt.Sprint(len(body)) != r.URL.Query().Get("size") {
		fail(w, http.StatusBadRequest, "upload does not match its oid and size")
		return
	}
	h.lfs[oid] = body
	w.WriteHeader(http.StatusOK)
}

func (h *Hub) verify(w http.ResponseWriter, r *http.Request) {
	var o struct {
		OID  string `json:"oid"`
		Size int    `json:"size"`
	}
	json.NewDecoder(r.Body).Decode(&o)
	if b, ok := h.lfs[o.OID]; !ok || len(b) != o.Size {
		fail(w, http.StatusNotFound, "object %s not stored", o.OID)
		return
	}
	reply(w, map[string]string{"message": "verified"})
}

// commit applies an NDJSON commit to a branch: regular files inline, LFS
// files by oid (which must have been uploaded), deletions.
func (h *Hub) commit(w http.ResponseWriter, r *http.Request, rp *repo, id, branch string) {
	parent := rp.branches[branch]
	if parent == nil {
		fail(w, http.StatusNotFound, "Revision not found")
		return
	}
	next := &commit{files: map[string][]byte{}, lfs: map[string]string{}}
	for k, v := range parent.files {
		next.files[k] = v
	}
	for k, v := range parent.lfs {
		next.lfs[k] = v
	}
	digest := sha1.New()
	fmt.Fprintf(digest, "parent %s\n", parent.id)
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var line struct {
			Key   string `json:"key"`
			Value struct {
				Path     string `json:"path"`
				Content  string `json:"content"`
				Encoding string `json:"encoding"`
				OID      string `json:"oid"`
				Algo     string `json:"algo"`
				Size     int    `json:"size"`
			} `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			fail(w, http.StatusBadRequest, "bad NDJSON line: %v", err)
			return
		}
		v := line.Value
		switch line.Key {
		case "header":
		case "file":
			content := []byte(v.Content)
			if v.Encoding == "base64" {
				var err error
				if content, err = base64.StdEncoding.DecodeString(v.Content); err != nil {
					fail(w, http.StatusBadRequest, "bad base64 in %s", v.Path)
					return
				}
			}
			next.files[v.Path] = content
			delete(next.lfs, v.Path)
		case "lfsFile":
			b, ok := h.lfs[v.OID]
			if !ok || len(b) != v.Size {
				fail(w, http.StatusUnprocessableEntity, "LFS object %s of %s was not uploaded", v.OID, v.Path)
				return
			}
			next.files[v.Path], next.lfs[v.Path] = b, v.OID
		case "deletedFile":
			delete(next.files, v.Path)
			delete(next.lfs, v.Path)
		default:
			fail(w, http.StatusBadRequest, "unknown commit key %q", line.Key)
			return
		}
		digest.Write(sc.Bytes())
	}
	next.id = hex.EncodeToString(digest.Sum(nil))
	rp.branches[branch] = next
	reply(w, map[string]any{"success": true, "commitOid": next.id, "commitUrl": fmt.Sprintf("%s/%s/commit/%s", h.URL, id, next.id)})
}

// resolve serves a file of a revision, with byte ranges, the ETag the Hub
// gives (the LFS oid for LFS files) and the commit it came from.
func (h *Hub) resolve(w http.ResponseWriter, r *http.Request) {
	before, after, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/resolve/")
	rp, _, _, ok := h.find(w, r, before, false)
	if !ok {
		return
	}
	branch, path, _ := strings.Cut(after, "/")
	c := rp.branches[branch]
	if c == nil {
		fail(w, http.StatusNotFound, "Revision not found")
		return
	}
	b, ok := c.files[path]
	if !ok {
		fail(w, http.StatusNotFound, "Entry not found")
		return
	}
	etag := sha1hex(append([]byte(fmt.Sprintf("blob %d\x00", len(b))), b...))
	if oid, isLFS := c.lfs[path]; isLFS {
		etag = oid
		w.Header().Set("X-Linked-Etag", `"`+oid+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
	}
	w.Header().Set("ETag", `"`+etag+`"`)
	w.Header().Set("X-Repo-Commit", c.id)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, path, time.Time{}, bytes.NewReader(b))
}

func sha1hex(b []byte) string {
	s := sha1.Sum(b)
	return hex.EncodeToString(s[:])
}
