package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wts-project/wts/kernels/sampler"
)

// captureStdout runs f with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, _ := os.Pipe()
	old := os.Stdout
	os.Stdout = w
	err := f()
	w.Close()
	os.Stdout = old
	out, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestModelInitInfoSample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	captureStdout(t, func() error {
		return run([]string{"model", "init", "--preset", "tiny-qwen3", "--seed", "4", "--out", dir, "--dtype", "bf16"})
	})
	info := captureStdout(t, func() error { return run([]string{"model", "info", dir}) })
	if !strings.Contains(info, "qwen3") {
		t.Fatalf("info: %s", info)
	}
	out := captureStdout(t, func() error {
		return run([]string{"sample", "--model", dir, "--prompt", "1,2,3", "--n", "2", "--max-tokens", "5", "--seed", "9"})
	})
	var res sampler.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Sequences) != 2 || len(res.Sequences[0].Tokens) == 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestBadCommands(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"model"}, {"model", "init"}, {"model", "init", "--out", t.TempDir(), "--preset", "huge"},
		{"model", "init", "--out", t.TempDir(), "--dtype", "int8"}, {"sample"}, {"sample", "--model", t.TempDir()},
		{"serve", "--offer", "provider_a"}, {"serve", "--offer", "provider_c=small"}} {
		if err := run(args); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
