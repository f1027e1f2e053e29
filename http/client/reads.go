package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// SeqPage is a page of a run's (or sampler's) records in seq_id order;
// pass NextAfterSeq back for the next page.
type SeqPage[T any] struct {
	Items        []T   `json:"items"`
	NextAfterSeq int64 `json:"next_after_seq"`
}

// Checkpoint is a run's saved state.
type Checkpoint struct {
	ID        string    `json:"id"`
	RunID     string    `json:"run_id"`
	SeqID     int64     `json:"seq_id"`
	Name      string    `json:"name"`
	Step      int64     `json:"step"`
	SizeBytes int64     `json:"size_bytes"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// ArtifactFile is one file of an artifact.
type ArtifactFile struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	SHA256    string `json:"sha256"`
}

// Artifact is a run's exported adapter.
type Artifact struct {
	ID        string         `json:"id"`
	RunID     string         `json:"run_id"`
	SeqID     int64          `json:"seq_id"`
	Kind      string         `json:"kind"`
	Checksum  string         `json:"checksum"`
	SizeBytes int64          `json:"size_bytes"`
	Status    string         `json:"status"`
	Files     []ArtifactFile `json:"files"`
	CreatedAt time.Time      `json:"created_at"`
}

// DownloadLinks are an artifact's files with their signed links.
type DownloadLinks struct {
	ArtifactID string    `json:"artifact_id"`
	Format     string    `json:"format"`
	ExpiresAt  time.Time `json:"expires_at"`
	Files      []struct {
		ArtifactFile
		URL string `json:"url"`
	} `json:"files"`
}

// ListOperations pages a run's operations after seq_id after.
func (c *Client) ListOperations(ctx context.Context, runID string, after int64, limit int) (*SeqPage[Operation], error) {
	var p SeqPage[Operation]
	return &p, c.do(ctx, "GET", seqPath("runs", runID, "operations", after, limit), nil, &p)
}

// ListCheckpoints pages a run's checkpoints.
func (c *Client) ListCheckpoints(ctx context.Context, runID string, after int64, limit int) (*SeqPage[Checkpoint], error) {
	var p SeqPage[Checkpoint]
	return &p, c.do(ctx, "GET", seqPath("runs", runID, "checkpoints", after, limit), nil, &p)
}

// ListArtifacts pages a run's artifacts.
func (c *Client) ListArtifacts(ctx context.Context, runID string, after int64, limit int) (*SeqPage[Artifact], error) {
	var p SeqPage[Artifact]
	return &p, c.do(ctx, "GET", seqPath("runs", runID, "artifacts", after, limit), nil, &p)
}

func seqPath(owner, id, what string, after int64, limit int) string {
	return fmt.Sprintf("/v1/training/%s/%s/%s?after_seq=%d&limit=%d", owner, url.PathEscape(id), what, after, limit)
}

// GetExport reads a hub export: {"export": ..., "artifact": ...}.
func (c *Client) GetExport(ctx context.Context, id string) (json.RawMessage, error) {
	var raw json.RawMessage
	return raw, c.do(ctx, "GET", "/v1/training/exports/"+url.PathEscape(id), nil, &raw)
}

// FinishRun finishes a run once its queued operations are done.
func (c *Client) FinishRun(ctx context.Context, runID string) (*Operation, error) {
	var op Operation
	return &op, c.do(ctx, "POST", "/v1/training/runs/"+url.PathEscape(runID)+"/finish", map[string]string{"request_id": "finish-" + runID}, &op)
}

// DownloadLinks signs links to an artifact's files, in format "peft" (the
// adapter) or "merged" (the base with the adapter folded in).
func (c *Client) DownloadLinks(ctx context.Context, artifactID, format string) (*DownloadLinks, error) {
	var l DownloadLinks
	return &l, c.do(ctx, "POST", "/v1/training/artifacts/"+url.PathEscape(artifactID)+"/download_urls", map[string]string{"format": format}, &l)
}

// Download writes the file behind a signed link to w, calling progress
// with the bytes written so far, and checks its SHA-256 when want is set.
func (c *Client) Download(ctx context.Context, link, want string, w io.Writer, progress func(done int64)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", link, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return envelope(resp, data)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h, &counter{progress: progress}), resp.Body); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
		return fmt.Errorf("download: SHA-256 %s, the artifact says %s", got, want)
	}
	return nil
}

// counter reports the bytes written through it so far.
type counter struct {
	done     int64
	progress func(done int64)
}

func (c *counter) Write(p []byte) (int, error) {
	c.done += int64(len(p))
	if c.progress != nil {
		c.progress(c.done)
	}
	return len(p), nil
}
