package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/nodetest"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/http/auth"
	"github.com/wts-project/wts/http/jcs"
	"github.com/wts-project/wts/persistence"
)

// TestConcurrency drives one in-process node from many clients at once, each
// with its own session and run, and checks that every operation is accepted
// once, in order, and runs. `make test` runs it under the race detector.
func TestConcurrency(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := nodetest.Start(t, nodetest.Registry(t), t.TempDir())
	key, err := auth.Create(sys.Store(), "acme", false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Every client's session reserves 100 USD.
	if _, err := OrgLedger(sys.Store(), "credit", OrgRequest{Org: "acme", MicroUSD: 1e12}, time.Now()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(sys, Config{Log: quiet})
	go srv.Serve(ln)
	defer func() {
		srv.Shutdown(context.Background())
		sys.Stop(context.Background())
	}()
	base := "http://" + ln.Addr().String() + "/v1/training"
	m, _ := sys.Registry().Catalog().Lookup("tiny")

	post := func(path string, body any) (map[string]any, int, error) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		var out map[string]any
		err = json.NewDecoder(resp.Body).Decode(&out)
		return out, resp.StatusCode, err
	}
	const clients, perClient = 12, 6
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			errs <- func() error {
				s, code, err := post("/sessions", map[string]any{"request_id": fmt.Sprint("s", c)})
				if err != nil || code != 201 {
					return fmt.Errorf("session: %d %v %v", code, err, s)
				}
				r, code, err := post("/sessions/"+s["id"].(string)+"/runs", map[string]any{"request_id": "r", "base_model": "tiny", "model_revision": m.Revision, "lora": map[string]any{"rank": 2}})
				if err != nil || code != 201 {
					return fmt.Errorf("run: %d %v %v", code, err, r)
				}
				rid := r["id"].(string)
				for seq := 1; seq <= perClient; seq++ {
					kind, p := "forward_backward", any(map[string]any{"data": []any{map[string]any{
						"model_input": map[string]any{"token_ids": []int{1, 2, 3, c}}, "loss_fn_inputs": map[string]any{"target_tokens": []int{2, 3, c, 4}}}}})
					if seq%2 == 0 {
						kind, p = "optim_step", map[string]any{}
					}
					env := map[string]any{"seq_id": seq, "idempotency_key": fmt.Sprint(seq), "kind": kind, "payload": p}
					raw, _ := json.Marshal(env)
					canon, _ := jcs.Canonical(raw, "")
					sum := sha256.Sum256(canon)
					env["request_hash"] = hex.EncodeToString(sum[:])
					for try := 0; try < 2; try++ { // a retry returns the same operation
						o, code, err := post("/runs/"+rid+"/operations", env)
						if err != nil || code != 202 || o["seq_id"].(float64) != float64(seq) {
							return fmt.Errorf("op %d: %d %v %v", seq, code, err, o)
						}
					}
				}
				deadline := time.Now().Add(60 * time.Second)
				for {
					p, err := sys.ListOperations(persistenceTenant(), rid, 0, 100)
					if err != nil {
						return err
					}
					done := 0
					for _, o := range p.Items {
						if o.Status == states.OpSucceeded {
							done++
						} else if states.Terminal(states.OpMoves, o.Status) {
							return fmt.Errorf("run %s op %d: %s", rid, o.SeqID, o.Status)
						}
					}
					if len(p.Items) != perClient {
						return fmt.Errorf("run %s has %d operations, want %d", rid, len(p.Items), perClient)
					}
					if done == perClient {
						return nil
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("run %s: %d of %d done", rid, done, perClient)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func persistenceTenant() persistence.Tenant { return persistence.Tenant{Org: "acme"} }
