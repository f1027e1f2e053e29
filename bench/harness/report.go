package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Files a report writes into its folder.
const (
	JSONFile       = "results.json"
	MDFile         = "results.md"
	CDFFile        = "latency-cdf.png"
	ThroughputFile = "throughput.png"
	TailFile       = "p99.png"
)

// Provenance is where and how a report was made.
type Provenance struct {
	Machine string `json:"machine"`
	Commit  string `json:"commit"`
	Command string `json:"command"`
	Started string `json:"started"`
}

// Begin is the provenance of a report that starts now.
func Begin() Provenance { return Provenance{Started: time.Now().UTC().Format(time.RFC3339)} }

// Describe fills in the machine, the binary's commit and the command.
func (p *Provenance) Describe(command string) {
	p.Machine, p.Commit, p.Command = Machine(), Commit(), command
}

// markdown writes p's lines of a report's Markdown.
func (p *Provenance) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "Machine: %s. Commit: %s. Started: %s.\n\n", p.Machine, p.Commit, p.Started)
	if p.Command != "" {
		fmt.Fprintf(b, "```\n%s\n```\n\n", p.Command)
	}
}

// Machine is the CPU's model name and its logical cores.
func Machine() string {
	name := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				name = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d logical cores", name, runtime.NumCPU())
}

// Commit is the binary's VCS revision (with "+dirty" when built from a
// modified tree), "unknown" when it was built without one.
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// writeTables writes v as JSONFile and md as MDFile into dir.
func writeTables(dir string, v any, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, JSONFile), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, MDFile), []byte(md), 0o644)
}

// Write writes the report into dir: JSONFile, MDFile and the plots.
func (r *Report) Write(dir string) error {
	if err := writeTables(dir, r, r.Markdown()); err != nil {
		return err
	}
	for name, c := range map[string]*Chart{CDFFile: r.cdfChart(), ThroughputFile: r.throughputChart(), TailFile: r.tailChart()} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = c.WritePNG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// loadName is what a level's load counts.
func (r *Report) loadName() string {
	if r.Loop == Open {
		return "requests/s offered"
	}
	return "clients"
}

// levelName names a level in a legend.
func (r *Report) levelName(l Level) string {
	switch {
	case r.Loop == Open:
		return fmt.Sprintf("%g requests/s", l.Load)
	case l.Load == 1:
		return "1 client"
	}
	return fmt.Sprintf("%g clients", l.Load)
}

// Markdown is the report as a heading, its conditions and one table.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sampling: %s, %s loop\n\n", r.Model, r.Loop)
	fmt.Fprintf(&b, "Prompt %s tokens, output %s tokens (greedy), LoRA rank %d; one request in %d is a one-token probe (time to first token). Goodput: requests (probes aside) that ended within TTFT %v + (tokens−1)·ITL %v.\n\n",
		r.Prompt, r.Output, r.Rank, ProbeEvery, r.SLO.TTFT, r.SLO.ITL)
	r.Provenance.markdown(&b)
	fmt.Fprintf(&b, "| %s | adapters | requests/s | tokens/s | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | end to end p50 / p90 / p99 ms | goodput requests/s | errors |\n", r.loadName())
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range r.Levels {
		fmt.Fprintf(&b, "| %g | %d | %.2f | %.1f | %s | %s | %s | %.2f | %d |\n", l.Load, l.Adapters, l.RequestsPerS, l.TokensPerS,
			l.TTFT, l.ITL, l.E2E, l.GoodputPerS, l.Errors)
	}
	if e := r.Baseline; e != nil {
		fmt.Fprintf(&b, "\nThe engine alone, in process, one stream on the same model and adapter shape: TTFT %.2f ms, ITL %.2f ms, %.1f tokens/s.\n",
			e.TTFT, e.ITL, e.TokensPerS)
	}
	return b.String()
}

func (q Quantiles) String() string { return fmt.Sprintf("%.2f / %.2f / %.2f", q.P50, q.P90, q.P99) }

// cdfChart is each level's end-to-end latency distribution.
func (r *Report) cdfChart() *Chart {
	c := &Chart{Title: fmt.Sprintf("End-to-end latency CDF (%s, %s loop)", r.Model, r.Loop), XLabel: "latency (ms)", YLabel: "fraction"}
	for _, l := range r.Levels {
		s := Series{Name: r.levelName(l)}
		for i, v := range l.E2ESamples {
			s.X, s.Y = append(s.X, v), append(s.Y, float64(i+1)/float64(len(l.E2ESamples)))
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// throughputChart is output tokens/s and goodput against the load.
func (r *Report) throughputChart() *Chart {
	c := &Chart{Title: fmt.Sprintf("Throughput against load (%s, %s loop)", r.Model, r.Loop), XLabel: r.loadName(), YLabel: "per second"}
	tps, good := Series{Name: "output tokens/s"}, Series{Name: "goodput requests/s"}
	for _, l := range r.Levels {
		tps.X, tps.Y = append(tps.X, l.Load), append(tps.Y, l.TokensPerS)
		good.X, good.Y = append(good.X, l.Load), append(good.Y, l.GoodputPerS)
	}
	c.Series = []Series{tps, good}
	return c
}

// tailChart is the p99 latencies against the load.
func (r *Report) tailChart() *Chart {
	c := &Chart{Title: fmt.Sprintf("p99 latency against load (%s, %s loop)", r.Model, r.Loop), XLabel: r.loadName(), YLabel: "ms"}
	e2e, ttft, itl := Series{Name: "end to end"}, Series{Name: "time to first token"}, Series{Name: "inter-token"}
	for _, l := range r.Levels {
		e2e.X, e2e.Y = append(e2e.X, l.Load), append(e2e.Y, l.E2E.P99)
		ttft.X, ttft.Y = append(ttft.X, l.Load), append(ttft.Y, l.TTFT.P99)
		itl.X, itl.Y = append(itl.X, l.Load), append(itl.Y, l.ITL.P99)
	}
	c.Series = []Series{e2e, ttft, itl}
	return c
}
