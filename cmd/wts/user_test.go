package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/client"
)

// The user commands against a real server: what they list and show is
// what the client made, a wait ends with the operation, and a download
// writes the artifact's files.
func TestUserCommands(t *testing.T) {
	t.Setenv("WTS_MAIN", "1") // the test binary is wts for the processes it starts
	srv := service.Serve(os.Args[0], filepath.Join(t.TempDir(), "data"), "tiny")
	defer srv.Stop()
	wts := func(args ...string) (string, error) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "WTS_URL=http://"+srv.Addr, "WTS_API_KEY="+srv.Key)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New("http://"+srv.Addr, srv.Key)
	sess, err := c.CreateSession(ctx, client.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.CreateLoRATrainingClient(ctx, sess.ID, client.TrainingOptions{BaseModel: srv.Model, LoRA: client.LoRA{Rank: 4}})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := tc.ForwardBackward(ctx, []client.Datum{client.NextTokenDatum([]int{1, 5, 9, 13}, nil)}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := tc.SaveState(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := tc.ExportLoRA(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := wts("ops", "wait", ex.Op.ID)
	if err != nil || !strings.Contains(out, `"status": "succeeded"`) {
		t.Fatalf("ops wait: %v\n%s", err, out)
	}
	cp, _ := ck.Result(ctx)
	art, err := ex.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []struct {
		args []string
		want []string
	}{
		{[]string{"models"}, []string{srv.Model, srv.Revision}},
		{[]string{"sessions", "list"}, []string{sess.ID, "ready", tc.Run.ID}},
		{[]string{"sessions", "show", sess.ID}, []string{`"id": "` + sess.ID}},
		{[]string{"runs", "list", "--json"}, []string{`"id": "` + tc.Run.ID}},
		{[]string{"runs", "show", tc.Run.ID}, []string{`"metrics_summary"`, `"loss:sum"`}},
		{[]string{"ops", "list", tc.Run.ID}, []string{fb.Op.ID, "forward_backward", "save_state", "export_lora", "succeeded"}},
		{[]string{"ops", "show", fb.Op.ID}, []string{`"kind": "forward_backward"`}},
		{[]string{"checkpoints", tc.Run.ID}, []string{cp.CheckpointID, "mine"}},
		{[]string{"artifacts", tc.Run.ID}, []string{art.ArtifactID, "available"}},
	} {
		out, err := wts(check.args...)
		for _, w := range check.want {
			if err != nil || !strings.Contains(out, w) {
				t.Fatalf("wts %s: %v\n%s\nwant %q in it", strings.Join(check.args, " "), err, out, w)
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "adapter")
	if out, err := wts("download", art.ArtifactID, "--out", dir); err != nil {
		t.Fatalf("download: %v\n%s", err, out)
	}
	if st, err := os.Stat(filepath.Join(dir, "adapter_model.safetensors")); err != nil || st.Size() == 0 {
		t.Fatalf("the downloaded adapter: %v", err)
	}
	if out, err := wts("runs", "finish", tc.Run.ID); err != nil || !strings.Contains(out, `"kind": "finish"`) {
		t.Fatalf("runs finish: %v\n%s", err, out)
	}
	if out, err := wts("sessions", "close", sess.ID); err != nil || !strings.Contains(out, `"status": "closed"`) {
		t.Fatalf("sessions close: %v\n%s", err, out)
	}
	if _, err := wts("runs", "show", "wtr_00000000000000000000000000000000"); err == nil {
		t.Fatal("showing a run that does not exist succeeded")
	}
	if _, err := wts("sessions", "list", "--key", "svc_test_nope"); err == nil {
		t.Fatal("a wrong key listed sessions")
	}
}
