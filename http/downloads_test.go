package httpapi_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// get fetches a URL without a key; headers are name, value pairs.
func get(t *testing.T, url string, headers ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// links asks for signed links to an artifact's files in format.
func (n *node) links(key, aid, format string) map[string]string {
	n.t.Helper()
	r := n.do("POST", v1+"/artifacts/"+aid+"/download_urls", key, map[string]any{"format": format, "expires_in_s": 600})
	n.want(r, 200, "")
	out := map[string]string{}
	for _, f := range r.Body["files"].([]any) {
		f := f.(map[string]any)
		out[f["path"].(string)] = f["url"].(string)
	}
	return out
}

// TestDownloads fetches an exported adapter and its merged model through
// signed links, and shows that links cannot be stretched, edited or aimed
// elsewhere.
func TestDownloads(t *testing.T) {
	n := newNode(t)
	key := n.keys["acme"]
	_, rid := n.session(key, "x")
	ops := n.submit(key, rid, 1, append(train2, step{"export_lora", map[string]any{}}, step{"save_state", map[string]any{}})...)
	exp, cid := ops[4], result(ops[5], "checkpoint_id").(string)
	aid := result(exp, "artifact_id").(string)
	dir := filepath.Join(n.data, "artifacts", rid, "exports", aid)

	links := n.links(key, aid, "peft")
	if len(links) != 3 {
		t.Fatalf("links %v", links)
	}
	for name, url := range links {
		status, body := get(t, url)
		disk, _ := os.ReadFile(filepath.Join(dir, name))
		if status != 200 || !bytes.Equal(body, disk) {
			t.Errorf("%s: %d, %d bytes, want the %d on disk", name, status, len(body), len(disk))
		}
	}
	weights := links["adapter_model.safetensors"]
	disk, _ := os.ReadFile(filepath.Join(dir, "adapter_model.safetensors"))
	if status, body := get(t, weights, "Range", "bytes=8-99"); status != 206 || !bytes.Equal(body, disk[8:100]) {
		t.Errorf("range: %d, %d bytes", status, len(body))
	}
	// A range past the file is the error envelope too, not the file
	// server's plain text.
	status, body := get(t, weights, "Range", fmt.Sprintf("bytes=%d-", len(disk)+10))
	var env map[string]any
	if err := json.Unmarshal(body, &env); status != 416 || err != nil || env["error"].(map[string]any)["code"] != "range_not_satisfiable" || env["request_id"] == nil {
		t.Errorf("unsatisfiable range: %d %s", status, body)
	}

	// Edited links are refused; so is one past its expiry, and a signed
	// link to a name outside the manifest.
	signing, err := os.ReadFile(filepath.Join(n.data, "secrets", "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(path string, expires int64) string {
		m := hmac.New(sha256.New, signing)
		fmt.Fprintf(m, "GET\n%s\n%d", path, expires)
		return fmt.Sprintf("%s%s?expires=%d&signature=%s", n.base, path, expires, hex.EncodeToString(m.Sum(nil)))
	}
	path := "/v1/files/" + aid + "/peft/adapter_model.safetensors"
	future := time.Now().Add(time.Hour).Unix()
	for _, c := range []struct {
		name, url string
		status    int
		code      string
	}{
		{"our own signature", sign(path, future), 200, ""},
		{"expired", sign(path, time.Now().Add(-time.Second).Unix()), 403, "link_expired"},
		{"expiry moved", strings.Replace(weights, "expires=", "expires=9", 1), 403, "link_invalid"},
		{"signature changed", flipLast(weights), 403, "link_invalid"},
		{"no signature", n.base + path, 403, "link_invalid"},
		{"other file", strings.Replace(weights, "adapter_model.safetensors", "adapter_config.json", 1), 403, "link_invalid"},
		{"signed name outside the manifest", sign("/v1/files/"+aid+"/peft/wts.db", future), 404, "not_found"},
		{"signed traversal", sign("/v1/files/"+aid+"/peft/..%2F..%2F..%2Fwts.db", future), 404, "not_found"},
		{"signed unknown format", sign("/v1/files/"+aid+"/raw/adapter_config.json", future), 422, "validation_error"},
	} {
		status, body := get(t, c.url)
		if status != c.status || (c.code != "" && !strings.Contains(string(body), `"code":"`+c.code+`"`)) {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, body, c.status, c.code)
		}
	}
	n.want(n.do("POST", v1+"/artifacts/"+aid+"/download_urls", n.keys["other"], map[string]any{}), 404, "not_found")
	n.want(n.do("POST", v1+"/artifacts/"+aid+"/download_urls", key, map[string]any{"expires_in_s": 10}), 422, "validation_error")
	n.want(n.do("POST", v1+"/artifacts/"+aid+"/download_urls", key, map[string]any{"format": "zip"}), 422, "validation_error")

	defer n.checkRetire(key, rid, aid, cid, weights)

	// The merged model: base plus adapter folded in, as an HF folder that
	// loads on its own and gives what base and adapter give together.
	merged := n.links(key, aid, "merged")
	out := t.TempDir()
	for name, url := range merged {
		status, body := get(t, url)
		if status != 200 {
			t.Fatalf("merged %s: %d %s", name, status, body)
		}
		os.WriteFile(filepath.Join(out, name), body, 0o600)
	}
	mw, err := model.Load(out)
	if err != nil {
		t.Fatalf("merged folder %v: %v", merged, err)
	}
	bw, err := model.Load(n.modelDir)
	if err != nil {
		t.Fatal(err)
	}
	base := transformer.New(bw)
	ad, err := lora.LoadPEFT(dir, bw.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{3, 9, 27, 14, 5}
	want, _ := sampler.Logprobs(sampler.OnCPU(base), base.Freeze(ad), tokens)
	got, err := sampler.Logprobs(sampler.OnCPU(transformer.New(mw)), nil, tokens)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if math.Abs(*got[i]-*want[i]) > 1e-4 {
			t.Errorf("token %d: merged model %v, base with adapter %v", i, *got[i], *want[i])
		}
	}
}

// flipLast changes the last hex digit of s.
func flipLast(s string) string {
	if s[len(s)-1] == '0' {
		return s[:len(s)-1] + "1"
	}
	return s[:len(s)-1] + "0"
}

// checkRetire retires the run that made artifact aid and checkpoint cid:
// only once it has ended, idempotently, and its files and links go with it.
func (n *node) checkRetire(key, rid, aid, cid, link string) {
	t := n.t
	retire := func() *reply {
		return n.do("POST", v1+"/runs/"+rid+"/retire", key, map[string]any{"request_id": "r1"})
	}
	n.want(retire(), 409, "run_not_terminal")
	n.want(n.do("POST", v1+"/runs/"+rid+"/finish", key, map[string]any{"request_id": "f"}), 202, "")
	deadline := time.Now().Add(30 * time.Second)
	for n.do("GET", v1+"/runs/"+rid, key, nil).str("status") != "finished" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for range 2 {
		r := retire()
		n.want(r, 200, "")
		if r.str("id") != rid || r.str("status") != "finished" || r.Body["retired"] != true {
			t.Errorf("retire: %s", r.Raw)
		}
	}
	if a := n.do("GET", v1+"/artifacts/"+aid, key, nil); a.str("status") != "retired" {
		t.Errorf("artifact after retire: %s", a.Raw)
	}
	if c := n.do("GET", v1+"/checkpoints/"+cid, key, nil); c.str("status") != "retired" {
		t.Errorf("checkpoint after retire: %s", c.Raw)
	}
	if _, err := os.Stat(filepath.Join(n.data, "artifacts", rid)); !os.IsNotExist(err) {
		t.Errorf("the artifact prefix is still there: %v", err)
	}
	if status, _ := get(t, link); status != 404 {
		t.Errorf("a link minted before retire answers %d", status)
	}
	n.want(n.do("POST", v1+"/artifacts/"+aid+"/download_urls", key, map[string]any{}), 409, "artifact_retired")
	_, other := n.session(key, "after-retire")
	n.want(n.do("POST", v1+"/runs/"+other+"/operations", key, op(1, "l", "load_state", map[string]any{"checkpoint_id": cid})), 409, "checkpoint_retired")
}
