package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wts-project/wts/bench/harness"
	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/client"
)

func benchCmd(args []string) error {
	return sub("bench", args, []command{
		{"sample", "[--url URL --key KEY | --preset NAME] [--loop closed|open] [--levels 1,4,16] ...", "the sampling benchmark: latency, throughput and goodput under load (bench/README.md)", benchSample},
		{"train", "[--url URL --key KEY | --preset NAME] [--batch 4 --seq 128 --rank 16 --steps 10]", "the training benchmark: forward_backward and optim_step through the API, beside the engine alone", benchTrain},
		{"summary", "[--dir build/bench]", "one table of the reports make bench wrote, with every peer's figures and the ratios; also written to DIR/summary.md", benchSummary},
	})
}

// target is where a benchmark's load goes: a running service, or a node
// of its own that the command starts on a generated model.
type target struct {
	url, key, preset, model string
}

func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.url, "url", os.Getenv("WTS_URL"), "a running service (env WTS_URL); empty: start a node of its own on --preset")
	fs.StringVar(&t.key, "key", os.Getenv("WTS_API_KEY"), "an API key of the running service (env WTS_API_KEY)")
	fs.StringVar(&t.model, "model", "", "the base model (default: the service's first)")
	fs.StringVar(&t.preset, "preset", "small", "with no --url: the generated model the node of its own serves")
}

// open returns a client of the target that polls every poll, the model
// to load (t.model or the service's first), the model's folder when the
// node is its own ("" otherwise), and what stops that node.
func (t *target) open(ctx context.Context, poll time.Duration) (c *client.Client, model, dir string, stop func(), err error) {
	stop = func() {}
	url, key := t.url, t.key
	if url == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, "", "", stop, err
		}
		data, err := os.MkdirTemp("", "wts-bench-")
		if err != nil {
			return nil, "", "", stop, err
		}
		node := service.Serve(exe, data, t.preset, "--sampler-idle", "1h")
		stop = func() { node.Stop(); os.RemoveAll(data) }
		url, key, dir = "http://"+node.Addr, node.Key, node.ModelDir
		fmt.Fprintf(os.Stderr, "a node of its own on %s, serving %s\n", node.Addr, t.preset)
	}
	c = client.New(url, key, client.WithPolling(poll, poll))
	if model = t.model; model == "" {
		ms, err := c.Models(ctx)
		if err != nil {
			return nil, "", "", stop, err
		}
		if len(ms) == 0 {
			return nil, "", "", stop, errors.New("the service serves no model")
		}
		model = ms[0].Name
	}
	return c, model, dir, stop, nil
}

func benchTrain(args []string) error {
	fs := flag.NewFlagSet("bench train", flag.ContinueOnError)
	var t target
	t.register(fs)
	cfg := harness.TrainConfig{}
	fs.IntVar(&cfg.Batch, "batch", 4, "sequences per forward_backward")
	fs.IntVar(&cfg.Seq, "seq", 128, "tokens per sequence")
	fs.IntVar(&cfg.Rank, "rank", 16, "LoRA rank (attention and MLP)")
	fs.IntVar(&cfg.Steps, "steps", 10, "timed steps, after one warm-up")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the batches and the adapter")
	out := fs.String("out", "build/bench/train", "folder for results.json and results.md")
	engine := fs.Bool("engine", true, "with a node of its own: also run the loop on the engine alone, in process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()
	c, model, dir, stop, err := t.open(ctx, 2*time.Millisecond)
	defer stop()
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	cfg.Model = model
	rep, err := harness.RunTrain(ctx, c, cfg)
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	if dir != "" && *engine {
		if rep.Engine, err = harness.EngineTrain(dir, cfg); err != nil {
			return fmt.Errorf("bench train: the engine alone: %w", err)
		}
	}
	rep.Describe("wts bench " + strings.Join(append([]string{"train"}, args...), " "))
	if err := rep.Write(*out); err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	fmt.Print(rep.Markdown())
	return nil
}

func benchSample(args []string) error {
	fs := flag.NewFlagSet("bench sample", flag.ContinueOnError)
	var t target
	t.register(fs)
	loop := fs.String("loop", harness.Closed, "closed: --levels are concurrent clients; open: --levels are Poisson arrivals per second")
	levels := fs.String("levels", "1,4,16", "load levels, comma-separated")
	duration := fs.Duration("duration", 20*time.Second, "how long each level runs")
	prompt := fs.String("prompt", "16", "prompt tokens: N or LO-HI (uniform)")
	output := fs.String("output", "32", "output tokens: N or LO-HI (uniform)")
	adapters := fs.String("adapters", "clients", "samplers (LoRA adapters on the base model) the requests spread over: N, or clients (closed loop: one per client)")
	rank := fs.Int("rank", 8, "LoRA rank of each adapter")
	sloTTFT := fs.Duration("slo-ttft", time.Second, "goodput: time to first token allowed")
	sloITL := fs.Duration("slo-itl", 200*time.Millisecond, "goodput: time per further token allowed")
	poll := fs.Duration("poll", 2*time.Millisecond, "how often a request's operation is polled (the latencies' resolution)")
	seed := fs.Uint64("seed", 1, "seed of the requests and arrivals")
	out := fs.String("out", "build/bench/sample", "folder for results.json, results.md and the plots")
	engine := fs.Bool("engine", true, "with a node of its own: also time the engine alone on the same model, in process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := harness.Config{Loop: *loop, Duration: *duration, Rank: *rank, Seed: *seed, SLO: harness.SLO{TTFT: *sloTTFT, ITL: *sloITL}}
	var err error
	if cfg.Prompt, err = harness.ParseRange(*prompt); err != nil {
		return err
	}
	if cfg.Output, err = harness.ParseRange(*output); err != nil {
		return err
	}
	for _, s := range strings.Split(*levels, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("level %q: %w", s, err)
		}
		cfg.Levels = append(cfg.Levels, v)
	}
	if *adapters != "clients" {
		if cfg.Adapters, err = strconv.Atoi(*adapters); err != nil || cfg.Adapters < 1 {
			return fmt.Errorf("--adapters %q: a positive number, or clients", *adapters)
		}
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stopSignals()
	c, model, dir, stop, err := t.open(ctx, *poll)
	defer stop()
	if err != nil {
		return fmt.Errorf("bench sample: %w", err)
	}
	cfg.Model = model
	rep, err := harness.Run(ctx, c, cfg)
	if err != nil {
		return fmt.Errorf("bench sample: %w", err)
	}
	if dir != "" && *engine {
		if rep.Baseline, err = harness.EngineAlone(dir, cfg.Rank, cfg.Prompt.Hi, cfg.Output.Hi, 5); err != nil {
			return fmt.Errorf("bench sample: the engine alone: %w", err)
		}
	}
	rep.Describe("wts bench " + strings.Join(append([]string{"sample"}, args...), " "))
	if err := rep.Write(*out); err != nil {
		return fmt.Errorf("bench sample: %w", err)
	}
	fmt.Print(rep.Markdown())
	fmt.Fprintf(os.Stderr, "\nwrote %s/{%s,%s,%s,%s,%s}\n", *out, harness.JSONFile, harness.MDFile, harness.CDFFile, harness.ThroughputFile, harness.TailFile)
	return nil
}

func benchSummary(args []string) error {
	fs := flag.NewFlagSet("bench summary", flag.ContinueOnError)
	dir := fs.String("dir", "build/bench", "the folder make bench writes its reports into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	md, err := harness.Summary(*dir)
	if err != nil {
		return fmt.Errorf("bench summary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "summary.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("bench summary: %w", err)
	}
	fmt.Print(md)
	return nil
}
