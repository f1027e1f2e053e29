package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The files make bench writes into one folder, which Summary reads.
const (
	GEMMFile        = "gemm-wts.json"      // GEMMFigures
	OpenBLASFile    = "gemm-openblas.json" // GEMMFigures
	EnginePattern   = "engine-*.json"      // EngineReport, one a model
	TorchTrainFile  = "torch-train-%s.json"
	APIFile         = "api.json" // APIReport
	TrainDir        = "train"    // TrainReport
	SampleClosedDir = "sample-closed"
	SampleOpenDir   = "sample-open"
	AdaptersDir     = "sample-adapters"
)

// summary gathers rows and where they came from.
type summary struct {
	rows     [][5]string // measure, wts, peer, ratio, commit
	commands []string
	machine  string
	started  []string
}

func (s *summary) add(p Provenance, measure, wts, peer, ratio string) {
	s.rows = append(s.rows, [5]string{measure, wts, peer, ratio, p.Commit})
	if s.machine == "" {
		s.machine = p.Machine
	}
	if p.Started != "" {
		s.started = append(s.started, p.Started)
	}
	for _, c := range s.commands {
		if c == p.Command {
			return
		}
	}
	if p.Command != "" {
		s.commands = append(s.commands, p.Command)
	}
}

// readJSON reads v from path; a missing file is reported as false, nil.
func readJSON(path string, v any) (bool, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// Summary reads the reports that make bench wrote into dir and returns
// them as one Markdown table: each measure, wts's figure, its peers' in
// the same run and the ratios, with the machine, the commit and the
// commands. Reports that are missing leave their rows out; none at all is
// an error.
func Summary(dir string) (string, error) {
	var s summary
	engines, err := engineReports(dir)
	if err != nil {
		return "", err
	}
	if err := gemmRows(dir, engines, &s); err != nil {
		return "", err
	}
	if err := engineRows(dir, engines, &s); err != nil {
		return "", err
	}
	for _, step := range []func(string, *summary) error{trainRows, sampleRows, apiRows} {
		if err := step(dir, &s); err != nil {
			return "", err
		}
	}
	if len(s.rows) == 0 {
		return "", fmt.Errorf("no benchmark reports in %s", dir)
	}
	return s.markdown(), nil
}

// engineReports are the folder's enginebench reports, the smallest model
// first.
func engineReports(dir string) ([]EngineReport, error) {
	files, err := filepath.Glob(filepath.Join(dir, EnginePattern))
	if err != nil {
		return nil, err
	}
	var reps []EngineReport
	for _, f := range files {
		var r EngineReport
		if _, err := readJSON(f, &r); err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].WeightBytes < reps[j].WeightBytes })
	return reps, nil
}

func (s *summary) markdown() string {
	var b strings.Builder
	commits := map[string]bool{}
	for _, r := range s.rows {
		commits[r[4]] = true
	}
	sort.Strings(s.started)
	fmt.Fprintf(&b, "Machine: %s. Started: %s to %s.", s.machine, s.started[0], s.started[len(s.started)-1])
	mixed := len(commits) > 1
	if !mixed {
		fmt.Fprintf(&b, " Commit: %s.", s.rows[0][4])
	}
	b.WriteString(" Ratios are wts over its peer in the same run.\n\n")
	if mixed {
		b.WriteString("| measure | wts | peer, same run | ratio | commit |\n|---|---|---|---|---|\n")
	} else {
		b.WriteString("| measure | wts | peer, same run | ratio |\n|---|---|---|---|\n")
	}
	for _, r := range s.rows {
		n := 4
		if mixed {
			n = 5
		}
		b.WriteString("| " + strings.Join(r[:n], " | ") + " |\n")
	}
	b.WriteString("\nCommands:\n\n")
	for _, c := range s.commands {
		fmt.Fprintf(&b, "- `%s`\n", c)
	}
	return b.String()
}

// span is "lo–hi" of xs (one value when they agree at the precision f).
func span(f string, xs []float64) string {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	a, z := fmt.Sprintf(f, lo), fmt.Sprintf(f, hi)
	if a == z {
		return a
	}
	return a + "–" + z
}

// gemmRows is the GEMM row; bench/run_engine.sh measures it just before
// the engine reports, whose provenance (engines[0]) it shares.
func gemmRows(dir string, engines []EngineReport, s *summary) error {
	var wts, blas GEMMFigures
	ok, err := readJSON(filepath.Join(dir, GEMMFile), &wts)
	if err != nil || !ok {
		return err
	}
	hasPeer, err := readJSON(filepath.Join(dir, OpenBLASFile), &blas)
	if err != nil {
		return err
	}
	var mine, theirs, ratios []float64
	for shape, g := range wts.GFLOPS {
		mine = append(mine, g)
		if p := blas.GFLOPS[shape]; p > 0 {
			theirs, ratios = append(theirs, p), append(ratios, g/p)
		}
	}
	if len(mine) == 0 {
		return fmt.Errorf("%s: no shapes", GEMMFile)
	}
	peer, ratio := "(not run)", ""
	if hasPeer && len(theirs) > 0 {
		peer, ratio = "OpenBLAS "+span("%.0f", theirs), span("%.2f", ratios)+"×, shape by shape"
	}
	p := Provenance{}
	if len(engines) > 0 {
		p = engines[0].Provenance
	}
	p.Command = "bash bench/run_engine.sh"
	s.add(p, fmt.Sprintf("fp32 GEMM GFLOP/s, %d projection shapes of the models", len(mine)),
		span("%.0f", mine), peer, ratio)
	return nil
}

func engineRows(dir string, reps []EngineReport, s *summary) error {
	for _, r := range reps {
		name := filepath.Base(r.Model)
		label := "`" + name + "`"
		if r.Weights != "" && r.Weights != "f32" {
			label += ", " + r.Weights + " weights"
			loadRow(r, label, reps, s)
		}
		if r.FwdBwdTokPerS > 0 {
			var t TorchTrain
			ok, err := readJSON(filepath.Join(dir, fmt.Sprintf(TorchTrainFile, name)), &t)
			if err != nil {
				return err
			}
			peer, ratio := "(not run)", ""
			if ok && t.FwdBwdTokPerS > 0 {
				peer = fmt.Sprintf("PyTorch %s (%d thread%s)", num(t.FwdBwdTokPerS), t.Threads, plural(t.Threads))
				ratio = fmt.Sprintf("%.2f×", r.FwdBwdTokPerS/t.FwdBwdTokPerS)
			}
			s.add(r.Provenance, fmt.Sprintf("LoRA forward_backward tokens/s, %s, %d tokens a step", label, r.Tokens),
				num(r.FwdBwdTokPerS), peer, ratio)
		}
		if r.DecodeTokPerS > 0 {
			s.add(r.Provenance, fmt.Sprintf("decode tokens/s, one stream, %s", label),
				fmt.Sprintf("%s, %.2f of the bandwidth bound", num(r.DecodeTokPerS), r.DecodeOfBound),
				r.decodePeers(func(p *DecodePeer) float64 { return p.DecodeTokPerS }),
				r.decodeRatios("decode_vs_"))
		}
		if r.Batch16TokPerS > 0 {
			s.add(r.Provenance, fmt.Sprintf("decode tokens/s, 16 streams, %s", label),
				fmt.Sprintf("%s (%.1f× one stream)", num(r.Batch16TokPerS), r.Batch16Speedup),
				r.decodePeers(func(p *DecodePeer) float64 { return p.Batch16TokPerS }),
				r.decodeRatios("batch16_vs_"))
		}
	}
	return nil
}

// loadRow is a 16-bit base's memory beside the float32 one's of the same
// model, when the run loaded both.
func loadRow(r EngineReport, label string, reps []EngineReport, s *summary) {
	if r.Load.ResidentBytes == 0 {
		return
	}
	peer, ratio := "(not run)", ""
	for _, f := range reps {
		if f.Model == r.Model && f.Weights == "f32" && f.Load.ResidentBytes > 0 {
			peer = "float32 " + f.Load.String()
			ratio = fmt.Sprintf("%.2f×", float64(r.Load.ResidentBytes)/float64(f.Load.ResidentBytes))
		}
	}
	s.add(r.Provenance, "base weights in memory, "+label, r.Load.String(), peer, ratio)
}

// String is the load as a table shows it: the weights' bytes, then what
// loading took where it was measured.
func (l BaseLoad) String() string {
	gb := func(b int64) string { return fmt.Sprintf("%.2f GB", float64(b)/1e9) }
	if l.PeakRSSBytes == 0 {
		return gb(l.ResidentBytes)
	}
	return fmt.Sprintf("%s (loading: %.1f s, peak RSS %s)", gb(l.ResidentBytes), l.Seconds, gb(l.PeakRSSBytes))
}

// num is a rate as a table shows it: whole numbers, grouped in thousands,
// from 100 up; one decimal below.
func num(x float64) string {
	if x < 100 {
		return fmt.Sprintf("%.1f", x)
	}
	d := fmt.Sprintf("%.0f", x)
	for i := len(d) - 3; i > 0; i -= 3 {
		d = d[:i] + "," + d[i:]
	}
	return d
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// decodePeerOrder is the order decode peers are listed in, with their
// names in a table.
var decodePeerOrder = []struct{ key, name string }{
	{"llamacpp_f32", "llama.cpp F32"}, {"llamacpp_f16", "llama.cpp F16"}, {"llamacpp_bf16", "llama.cpp BF16"}, {"pytorch", "PyTorch"},
}

// peer is the decode peer that key names, nil when it did not run.
func (r *EngineReport) peer(key string) *DecodePeer {
	if key == "pytorch" {
		return r.PyTorch
	}
	return r.LlamaCpp[strings.TrimPrefix(key, "llamacpp_")]
}

// decodePeers lists each peer's figure (f), with how many of its greedy
// tokens were wts's when not all.
func (r *EngineReport) decodePeers(f func(*DecodePeer) float64) string {
	var parts []string
	for _, o := range decodePeerOrder {
		p := r.peer(o.key)
		if p == nil {
			continue
		}
		part := o.name + " " + num(f(p))
		if len(p.Greedy) > 0 && p.GreedyAgree < len(p.Greedy) {
			part += fmt.Sprintf(" (greedy tokens: %d of %d agree)", p.GreedyAgree, len(p.Greedy))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "(not run)"
	}
	return strings.Join(parts, "; ")
}

// decodeRatios lists the ratios under prefix in decodePeerOrder.
func (r *EngineReport) decodeRatios(prefix string) string {
	var parts []string
	for _, o := range decodePeerOrder {
		if v, ok := r.Ratios[prefix+o.key]; ok {
			parts = append(parts, fmt.Sprintf("%.2f×", v))
		}
	}
	return strings.Join(parts, "; ")
}

func trainRows(dir string, s *summary) error {
	var r TrainReport
	ok, err := readJSON(filepath.Join(dir, TrainDir, JSONFile), &r)
	if err != nil || !ok {
		return err
	}
	peer, ratio := "(not run)", ""
	if e := r.Engine; e != nil {
		peer = fmt.Sprintf("the engine alone, same batches: %s, step p50 %.0f ms", num(e.TokensPerS), e.Step.P50)
		ratio = fmt.Sprintf("%.2f×", r.Overhead)
	}
	s.add(r.Provenance, fmt.Sprintf("a training loop through the API (forward_backward and optim_step, %d×%d tokens), `%s`", r.Batch, r.Seq, r.Model),
		fmt.Sprintf("%s tokens/s, step p50 %.0f ms", num(r.API.TokensPerS), r.API.Step.P50), peer, ratio)
	return nil
}

func sampleRows(dir string, s *summary) error {
	for _, sub := range []string{SampleClosedDir, SampleOpenDir, AdaptersDir} {
		var r Report
		ok, err := readJSON(filepath.Join(dir, sub, JSONFile), &r)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, l := range r.Levels {
			var measure string
			switch {
			case sub == AdaptersDir:
				measure = fmt.Sprintf("%d adapter%s on one base, one client each, `%s`", l.Adapters, plural(l.Adapters), r.Model)
			case r.Loop == Open:
				measure = fmt.Sprintf("sampling, open loop: %g requests/s over %d adapters, `%s`", l.Load, l.Adapters, r.Model)
			default:
				measure = fmt.Sprintf("sampling through the API, %g client%s, `%s`", l.Load, plural(int(l.Load)), r.Model)
			}
			measure += fmt.Sprintf(" (prompt %s, output %s tokens)", r.Prompt, r.Output)
			wts := fmt.Sprintf("%s tokens/s; TTFT p50 %.1f ms, p99 %.0f ms; ITL p50 %.1f ms, p99 %.0f ms; goodput %.2f/s",
				num(l.TokensPerS), l.TTFT.P50, l.TTFT.P99, l.ITL.P50, l.ITL.P99, l.GoodputPerS)
			if l.Errors > 0 {
				wts += fmt.Sprintf("; %d errors", l.Errors)
			}
			peer, ratio := "", ""
			if e := r.Baseline; e != nil && l.Load == 1 && r.Loop == Closed {
				peer = fmt.Sprintf("the engine alone, one stream: %s tokens/s; TTFT %.1f ms, ITL %.1f ms", num(e.TokensPerS), e.TTFT, e.ITL)
				ratio = fmt.Sprintf("%.2f×", l.TokensPerS/e.TokensPerS)
			}
			s.add(r.Provenance, measure, wts, peer, ratio)
		}
	}
	return nil
}

func apiRows(dir string, s *summary) error {
	var r APIReport
	ok, err := readJSON(filepath.Join(dir, APIFile), &r)
	if err != nil || !ok {
		return err
	}
	for _, l := range r.Levels {
		wts := fmt.Sprintf("%s/s, p50 %.1f ms, p99 %.1f ms", num(l.PerS), l.P50, l.P99)
		if l.CPUMicros > 0 {
			wts += fmt.Sprintf(", %.0f µs of CPU each", l.CPUMicros)
		}
		if l.Errors > 0 {
			wts += fmt.Sprintf("; %d errors", l.Errors)
		}
		s.add(r.Provenance, fmt.Sprintf("durable submissions, %d client%s (a %d-token forward on `tiny` each)", l.Clients, plural(l.Clients), r.Tokens),
			wts, fmt.Sprintf("a bare fasthttp handler: %s/s, p99 %.1f ms", num(l.PeerPerS), l.PeerP99), fmt.Sprintf("%.2f×", l.PerS/l.PeerPerS))
	}
	return nil
}
