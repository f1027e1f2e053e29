package main

import (
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wts-project/wts/bench/harness"
	"github.com/wts-project/wts/bench/service"
)

// The sampling benchmark's smoke run: a closed loop on a node of its own
// (with the engine alone beside it) and an open loop against a running
// service, each writing its JSON, Markdown table and plots; every request
// answered, and the figures hang together.
func TestBenchSample(t *testing.T) {
	t.Setenv("WTS_MAIN", "1") // the test binary is wts for the processes it starts
	t.Setenv("WTS_URL", "")
	srv := service.Serve(os.Args[0], filepath.Join(t.TempDir(), "data"), "tiny")
	defer srv.Stop()
	for _, c := range []struct {
		name string
		args []string
		env  []string
		want []float64
	}{
		{"closed, own node", []string{"--preset", "tiny", "--levels", "1,3", "--duration", "3s", "--prompt", "4-12", "--output", "6"}, nil, []float64{1, 3}},
		{"open, running service", []string{"--loop", "open", "--adapters", "2", "--levels", "20,40", "--duration", "2s", "--output", "2-8"},
			[]string{"WTS_URL=http://" + srv.Addr, "WTS_API_KEY=" + srv.Key}, []float64{20, 40}},
	} {
		out := t.TempDir()
		cmd := exec.Command(os.Args[0], append([]string{"bench", "sample", "--out", out}, c.args...)...)
		cmd.Env = append(os.Environ(), c.env...)
		stdout, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, stdout)
		}
		raw, err := os.ReadFile(filepath.Join(out, harness.JSONFile))
		if err != nil {
			t.Fatal(err)
		}
		var rep harness.Report
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Levels) != len(c.want) || rep.Model != "tiny" || rep.Machine == "" {
			t.Fatalf("%s: report %+v", c.name, rep)
		}
		for i, l := range rep.Levels {
			if l.Load != c.want[i] || l.Errors != 0 || l.Requests < 5 || l.TokensPerS <= 0 || l.TTFT.P50 <= 0 ||
				l.E2E.P50 > l.E2E.P99 || len(l.E2ESamples) == 0 || l.GoodputPerS > l.RequestsPerS {
				t.Fatalf("%s: level %+v", c.name, l)
			}
		}
		if (rep.Baseline != nil) != (c.env == nil) {
			t.Fatalf("%s: engine alone %+v", c.name, rep.Baseline)
		}
		md, _ := os.ReadFile(filepath.Join(out, harness.MDFile))
		if !strings.Contains(string(md), "| "+rep.Levels[0].TTFT.String()+" |") {
			t.Fatalf("%s: table\n%s", c.name, md)
		}
		for _, name := range []string{harness.CDFFile, harness.ThroughputFile, harness.TailFile} {
			f, err := os.Open(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil || img.Bounds().Dx() < 400 {
				t.Fatalf("%s: %s: %v", c.name, name, err)
			}
		}
	}
}

// The training benchmark's smoke run on a node of its own: the loop
// through the API and on the engine alone, and the report's files.
func TestBenchTrain(t *testing.T) {
	t.Setenv("WTS_MAIN", "1")
	t.Setenv("WTS_URL", "")
	out := t.TempDir()
	cmd := exec.Command(os.Args[0], "bench", "train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--rank", "4", "--steps", "3", "--out", out)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	raw, err := os.ReadFile(filepath.Join(out, harness.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var rep harness.TrainReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Model != "tiny" || rep.Steps != 3 || rep.API.TokensPerS <= 0 || rep.API.Step.P50 <= 0 || rep.API.Step.P50 > rep.API.Step.P99 ||
		rep.Engine == nil || rep.Engine.TokensPerS <= 0 || rep.Overhead <= 0 {
		t.Fatalf("report %+v", rep)
	}
	if md, _ := os.ReadFile(filepath.Join(out, harness.MDFile)); !strings.Contains(string(md), "| the engine alone |") {
		t.Fatalf("table\n%s", md)
	}
}
