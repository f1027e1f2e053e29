package artifacts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/artifacts"
	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers/hub/hubtest"
)

// Two exporters on one store (two nodes of a cluster) take exports from
// it together: each export is uploaded by one of them, once.
func TestExportsClaimed(t *testing.T) {
	const token = "hf_emulated_acme_0123456789"
	h := hubtest.New(map[string]string{token: "acme-ml"})
	defer h.Close()
	var commits atomic.Int64
	target, _ := url.Parse(h.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	hubProxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/commit/") {
			commits.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer hubProxy.Close()

	data := t.TempDir()
	s := nodetest.StartWith(t, actors.Config{DataDir: data, Registry: nodetest.Registry(t), HubEndpoint: hubProxy.URL})
	defer s.Stop(context.Background())
	_, run := nodetest.NewRun(t, s)
	op := nodetest.Submit(t, s, run.ID, 1, payload.ExportLoRA, json.RawMessage(`{}`))
	var out struct {
		ArtifactID string `json:"artifact_id"`
	}
	if err := json.Unmarshal(op.Result, &out); err != nil || op.Status != states.OpSucceeded {
		t.Fatalf("export_lora: %s %s %v", op.Status, op.Result, err)
	}
	cred, err := s.AddCredential(nodetest.Tenant, protocol.CredentialHub, "", "hub", []byte(token))
	if err != nil {
		t.Fatal(err)
	}
	vault, err := persistence.OpenVault(persistence.SecretPath(data, "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	other := artifacts.NewExports(s.Node(), vault, hubProxy.URL)
	stop := make(chan struct{})
	defer close(stop)
	go other.Run(stop)

	const n = 6
	var ids []string
	for i := range n {
		req := protocol.NewExport{Tenant: nodetest.Tenant, RequestID: fmt.Sprint("pub-", i), RunID: run.ID, ArtifactID: out.ArtifactID,
			Repo: "acme-ml/tiny-adapter", Revision: fmt.Sprint("v", i), CredentialID: cred.ID}
		create := s.CreateExport // the node's exporter is woken
		if i%2 == 1 {
			create = other.Create // the other one is
		}
		r, _, err := create(req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Export.ID)
	}
	for _, id := range ids {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r, err := s.GetExport(nodetest.Tenant, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Export.Status == states.ExportSucceeded {
				break
			}
			if r.Export.Status == states.ExportFailed || time.Now().After(deadline) {
				t.Fatalf("export %s: %+v", id, r.Export)
			}
		}
	}
	if got := commits.Load(); got != n {
		t.Fatalf("%d commits to the hub for %d exports", got, n)
	}
}
