package httpapi_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wts-project/wts/providers/hub/hubtest"
)

// addCredential registers a hub token for org through the CLI (the admin
// socket of the running node), the token on standard input.
func (n *node) addCredential(org, token string) string {
	n.t.Helper()
	cmd := exec.Command(binary, "credentials", "add", "--org", org, "--name", "hub", "--data", n.data)
	cmd.Stdin = strings.NewReader(token + "\n")
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("credentials add: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// pollExport waits for an export to end.
func (n *node) pollExport(key, id string) *reply {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := n.do("GET", v1+"/exports/"+id, key, nil)
		n.want(r, 200, "")
		if s := r.Body["export"].(map[string]any)["status"]; s == "succeeded" || s == "failed" {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.t.Fatalf("export %s did not end", id)
	return nil
}

// TestHubExport publishes an exported adapter to a hub emulator, reads it
// back with the official @huggingface/hub client byte for byte (after the
// same client has shown the emulator faithful), and checks the refusals.
func TestHubExport(t *testing.T) {
	const token = "hf_emulated_acme_0123456789"
	h := hubtest.New(map[string]string{token: "acme-ml", "hf_other": "someone"})
	defer h.Close()
	n := newNode(t, "--hub-endpoint", h.URL)
	key := n.keys["acme"]
	cred := n.addCredential("acme", token)
	if !strings.HasPrefix(cred, "wtk_") {
		t.Fatalf("credential id %q", cred)
	}
	_, rid := n.session(key, "x")
	aid := result(n.submit(key, rid, 1, append(train2, step{"export_lora", map[string]any{}})...)[4], "artifact_id").(string)
	body := map[string]any{"request_id": "pub-1", "artifact_id": aid, "repo": "acme-ml/tiny-adapter", "destination": "model_hub",
		"private": true, "credential_id": cred, "revision": "v1", "mode": "lora"}

	r := n.do("POST", v1+"/runs/"+rid+"/exports", key, body)
	n.want(r, 202, "")
	if _, has := r.Body["artifact"]; has || r.str("mode") != "lora" {
		t.Errorf("accepted export: %s", r.Raw)
	}
	id := r.Body["export"].(map[string]any)["id"].(string)
	done := n.pollExport(key, id)
	ex := done.Body["export"].(map[string]any)
	if ex["status"] != "succeeded" || ex["result_artifact_id"] != aid || ex["repo"] != "acme-ml/tiny-adapter" || ex["revision"] != "v1" || ex["commit_oid"] == nil {
		t.Fatalf("export: %s", done.Raw)
	}
	if a, ok := done.Body["artifact"].(map[string]any); !ok || a["id"] != aid {
		t.Errorf("a succeeded export shows its artifact: %s", done.Raw)
	}
	if again := n.do("POST", v1+"/runs/"+rid+"/exports", key, body); again.Status != 200 || again.Body["export"].(map[string]any)["id"] != id {
		t.Errorf("repeated request_id: %s", again.Raw)
	}
	if _, private := h.Private("acme-ml/tiny-adapter"); !private {
		t.Error("the repository is not private")
	}
	dir := filepath.Join(n.data, "artifacts", rid, "exports", aid)
	names := []string{"README.md", "adapter_config.json", "adapter_model.safetensors"}
	for _, name := range names {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		got, lfs, ok := h.File("acme-ml/tiny-adapter", "v1", name)
		if !ok || !bytes.Equal(got, want) || lfs != strings.HasSuffix(name, ".safetensors") {
			t.Errorf("%s on the hub: present %t, lfs %t, equal %t", name, ok, lfs, bytes.Equal(got, want))
		}
	}
	raw, _ := os.ReadFile(filepath.Join(n.data, "wts.db"))
	if bytes.Contains(raw, []byte(token)) || bytes.Contains(done.Raw, []byte(token)) {
		t.Error("the hub token is stored or shown in the clear")
	}

	// The official client: it drives the emulator, then reads the export.
	official(t, h.URL, token, names, func(out string) {
		for _, name := range names {
			want, _ := os.ReadFile(filepath.Join(dir, name))
			got, err := os.ReadFile(filepath.Join(out, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s read back by @huggingface/hub differs from the artifact (%v)", name, err)
			}
		}
	})

	// A token the hub refuses ends the export failed, with the hub's code.
	bad := n.addCredential("acme", "hf_revoked")
	body["request_id"], body["credential_id"] = "pub-2", bad
	r = n.do("POST", v1+"/runs/"+rid+"/exports", key, body)
	n.want(r, 202, "")
	failed := n.pollExport(key, r.Body["export"].(map[string]any)["id"].(string)).Body["export"].(map[string]any)
	if failed["status"] != "failed" || failed["error_code"] != "hub_unauthorized" {
		t.Errorf("export with a refused token: %v", failed)
	}

	_, other := n.session(key, "y")
	for _, c := range []struct {
		name   string
		rid    string
		change map[string]any
		key    string
		status int
		code   string
	}{
		{"token in the body", rid, map[string]any{"hub_token": token}, key, 422, "token_not_accepted"},
		{"unknown credential", rid, map[string]any{"credential_id": "wtk_" + strings.Repeat("0", 32)}, key, 404, "credential_not_found"},
		{"bad repo", rid, map[string]any{"repo": "no-slash"}, key, 422, "validation_error"},
		{"bad revision", rid, map[string]any{"revision": "../main"}, key, 422, "validation_error"},
		{"not lora", rid, map[string]any{"mode": "full"}, key, 422, "validation_error"},
		{"another run's artifact", other, nil, key, 422, "export_not_eligible"},
		{"unknown artifact", rid, map[string]any{"artifact_id": "00000000-0000-8000-8000-000000000000"}, key, 404, "not_found"},
		{"another organization", rid, nil, n.keys["other"], 404, "not_found"},
	} {
		b := map[string]any{}
		for k, v := range body {
			b[k] = v
		}
		b["request_id"] = "refused-" + c.name
		for k, v := range c.change {
			b[k] = v
		}
		r := n.do("POST", v1+"/runs/"+c.rid+"/exports", c.key, b)
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: got %d %s, want %d %s", c.name, r.Status, r.code(), c.status, c.code)
		}
	}
	n.want(n.do("GET", v1+"/exports/"+id, n.keys["other"], nil), 404, "not_found")
}

// official runs .ci/hub/roundtrip.mjs (the official client) against the
// emulator and hands check the folder it downloaded the export into. The
// client is installed by make test (npm ci in .ci/hub); without it the test
// is skipped, except in CI.
func official(t *testing.T, hubURL, token string, files []string, check func(out string)) {
	t.Helper()
	script, _ := filepath.Abs("../.ci/hub/roundtrip.mjs")
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@huggingface", "hub")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the official hub client is not installed (cd .ci/hub && npm ci)")
		}
		t.Skip("the official hub client is not installed: cd .ci/hub && npm ci")
	}
	out := t.TempDir()
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+hubURL, "HUB_TOKEN="+token, "SCRATCH_REPO=acme-ml/scratch",
		"EXPORT_REPO=acme-ml/tiny-adapter", "EXPORT_REVISION=v1", "EXPORT_FILES="+strings.Join(files, ","), "OUT_DIR="+out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("official client: %v\n%s", err, msg)
	}
	check(out)
}
