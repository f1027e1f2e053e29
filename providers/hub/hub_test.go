package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/providers/hub"
	"github.com/wts-project/wts/providers/hub/hubtest"
)

func file(t *testing.T, dir, name string, content []byte) hub.File {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	return hub.File{Path: name, Local: p, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
}

// TestUpload publishes a config and weights to a private repository on a
// branch: the weights go through LFS, the config inline, and a second upload
// of the same weights finds them stored.
func TestUpload(t *testing.T) {
	h := hubtest.New(map[string]string{"tok-alice": "alice"})
	defer h.Close()
	dir := t.TempDir()
	weights := bytes.Repeat([]byte{0, 1, 2, 3}, 3000)
	files := []hub.File{file(t, dir, "adapter_config.json", []byte(`{"r": 4}`)), file(t, dir, "adapter_model.safetensors", weights)}
	c := &hub.Client{Endpoint: h.URL, Token: "tok-alice"}
	ctx := context.Background()
	if err := c.CreateRepo(ctx, "alice/adapter", true); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateRepo(ctx, "alice/adapter", true); err != nil {
		t.Fatalf("creating an existing repository: %v", err)
	}
	if err := c.CreateBranch(ctx, "alice/adapter", "v1"); err != nil {
		t.Fatal(err)
	}
	oid, err := c.Upload(ctx, "alice/adapter", "v1", "first", files)
	if err != nil || oid == "" {
		t.Fatalf("upload: %q %v", oid, err)
	}
	if b, lfs, ok := h.File("alice/adapter", "v1", "adapter_model.safetensors"); !ok || !lfs || !bytes.Equal(b, weights) {
		t.Errorf("weights: stored %t, lfs %t", ok, lfs)
	}
	if b, lfs, ok := h.File("alice/adapter", "v1", "adapter_config.json"); !ok || lfs || string(b) != `{"r": 4}` {
		t.Errorf("config: %q lfs %t", b, lfs)
	}
	if _, _, ok := h.File("alice/adapter", "main", "adapter_config.json"); ok {
		t.Error("the upload to v1 reached main")
	}
	if _, private := h.Private("alice/adapter"); !private {
		t.Error("repository is not private")
	}
	if again, err := c.Upload(ctx, "alice/adapter", "v1", "again", files); err != nil || again == oid {
		t.Errorf("second upload: %q %v", again, err)
	}

	bad := &hub.Client{Endpoint: h.URL, Token: "nope"}
	if err := bad.CreateRepo(ctx, "alice/x", false); hub.CodeOf(err) != hub.CodeUnauthorized {
		t.Errorf("bad token: %v", err)
	}
	bob := &hub.Client{Endpoint: h.URL, Token: "tok-alice"}
	var e *hub.Error
	if _, err := bob.Upload(ctx, "alice/missing", "main", "x", files); !errors.As(err, &e) || e.Code != hub.CodeNotFound {
		t.Errorf("missing repository: %v", err)
	}
	down := &hub.Client{Endpoint: "http://127.0.0.1:1", Token: "t"}
	if err := down.CreateRepo(ctx, "a/b", false); hub.CodeOf(err) != hub.CodeUnreachable {
		t.Errorf("unreachable hub: %v", err)
	}
}
