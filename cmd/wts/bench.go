package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
	})
}

func benchSample(args []string) error {
	fs := flag.NewFlagSet("bench sample", flag.ContinueOnError)
	url := fs.String("url", os.Getenv("WTS_URL"), "a running service (env WTS_URL); empty: start a node of its own on --preset")
	key := fs.String("key", os.Getenv("WTS_API_KEY"), "an API key of the running service (env WTS_API_KEY)")
	modelName := fs.String("model", "", "the base model (default: the service's first)")
	preset := fs.String("preset", "small", "with no --url: the generated model the node of its own serves")
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
	cfg := harness.Config{Model: *modelName, Loop: *loop, Duration: *duration, Rank: *rank, Seed: *seed, SLO: harness.SLO{TTFT: *sloTTFT, ITL: *sloITL}}
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var dir string // the model folder, with a node of its own
	if *url == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		data, err := os.MkdirTemp("", "wts-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(data)
		node := service.Serve(exe, data, *preset, "--sampler-idle", "1h")
		defer node.Stop()
		*url, *key, dir = "http://"+node.Addr, node.Key, node.ModelDir
		fmt.Fprintf(os.Stderr, "a node of its own on %s, serving %s\n", node.Addr, *preset)
	}
	c := client.New(*url, *key, client.WithPolling(*poll, *poll))
	if cfg.Model == "" {
		ms, err := c.Models(ctx)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return errors.New("the service serves no model")
		}
		cfg.Model = ms[0].Name
	}
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
