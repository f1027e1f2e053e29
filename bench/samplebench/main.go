// Command samplebench measures sampling through the API of a real `wts
// serve`: time to first token and inter-token latency (p50/p99) and
// tokens/s, at several numbers of concurrent samplers (one per run, all on
// one base model, so the sampling executor batches them), beside the
// engine's single-stream decode measured in the same run.
//
// The API answers a sample once it is done (callers poll), so latency is
// taken per request: a 1-token request gives the time to first token, and an
// N-token request, less the median time to first token, over N−1 tokens,
// the inter-token latency. Requests are greedy with no stop tokens, so each
// makes exactly its max_tokens. Operations are polled every 2 ms.
//
//	go run ./bench/samplebench [--samplers 1,8,32] [--requests 8] [--tokens 32] [--preset small]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/client"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

const pollEvery = 2 * time.Millisecond

func main() {
	levelsFlag := flag.String("samplers", "1,8,32", "concurrent samplers per level, comma-separated")
	requests := flag.Int("requests", 8, "requests per sampler per phase")
	tokens := flag.Int("tokens", 32, "max_tokens of the decode phase")
	prompt := flag.Int("prompt", 16, "prompt tokens")
	rank := flag.Int("rank", 8, "LoRA rank of each run")
	preset := flag.String("preset", "small", "the generated base model")
	wts := flag.String("wts", "", "the wts binary (default: build it)")
	data := flag.String("data", "./build/samplebench", "data folder")
	debugAddr := flag.String("debug-addr", "", "passed to wts serve: serve pprof there (to profile the service under load)")
	flag.Parse()
	levels := service.Levels(*levelsFlag)
	svc := service.Serve(service.Build(*wts), *data, *preset, "--sampler-idle", "1h", "--debug-addr", *debugAddr)
	defer svc.Stop()

	b := &bench{prompt: make([]int, *prompt)}
	for i := range b.prompt {
		b.prompt[i] = 3 + i*7%50
	}
	// A sample is timed from its submission to the poll that finds it
	// done: the client polls every pollEvery.
	ctx := context.Background()
	for _, tc := range svc.Runs(slices.Max(levels), *rank, client.WithPolling(pollEvery, pollEvery)) {
		f, err := tc.SaveWeightsForSampler(ctx)
		if err == nil {
			_, err = f.Result(ctx)
		}
		if err != nil {
			log.Fatal(err)
		}
		sc, err := tc.SamplingClient(ctx)
		if err != nil {
			log.Fatal(err)
		}
		b.samplers = append(b.samplers, sc)
	}

	engine := singleStream(svc.ModelDir, *rank, b.prompt, *tokens, *requests)
	fmt.Printf("sampling on %s (LoRA rank %d), prompt %d tokens, %d requests per sampler per phase; greedy\n\n", *preset, *rank, *prompt, *requests)
	fmt.Printf("%8s | %9s %9s | %9s %9s | %10s | %s\n", "samplers", "TTFT p50", "p99 ms", "ITL p50", "p99 ms", "tokens/s", "engine single stream: TTFT, ITL ms, tokens/s")
	for _, c := range levels {
		ttft, _ := b.phase(c, *requests, 1)
		lat, rate := b.phase(c, *requests, *tokens)
		p50 := service.Percentile(ttft, 0.5)
		itl := make([]time.Duration, len(lat))
		for i, l := range lat {
			itl[i] = (l - time.Duration(p50*float64(time.Millisecond))) / time.Duration(*tokens-1)
		}
		slices.Sort(itl)
		fmt.Printf("%8d | %9.2f %9.2f | %9.2f %9.2f | %10.0f | %.2f, %.2f, %.0f\n", c, p50, service.Percentile(ttft, 0.99),
			service.Percentile(itl, 0.5), service.Percentile(itl, 0.99), rate, engine.ttft, engine.itl, engine.rate)
	}
}

type bench struct {
	prompt   []int
	samplers []*client.SamplingClient
}

// phase has c clients, each on its own sampler, make n requests of max
// tokens one after another; it returns every request's latency (sorted)
// and the tokens made per second of the phase.
func (b *bench) phase(c, n, max int) ([]time.Duration, float64) {
	all, took := service.Clients(c, func(i int) []time.Duration {
		s := b.samplers[i]
		var lat []time.Duration
		for range n {
			t0 := time.Now()
			f, err := s.Sample(context.Background(), client.SampleRequest{Prompt: client.ModelInput{TokenIDs: b.prompt}, NumSamples: 1,
				Parameters: client.SamplingParams{MaxTokens: max, Temperature: 0, TopP: 1, TopK: -1}})
			if err == nil {
				_, err = f.Result(context.Background())
			}
			if err != nil {
				log.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		return lat
	})
	return all, float64(c*n*max) / took.Seconds()
}

// engineFigures are the engine's single-stream decode figures.
type engineFigures struct{ ttft, itl, rate float64 }

// singleStream times the engine alone on the same model and adapter shape:
// Start (prefill and first token) and each Step of one request.
func singleStream(dir string, rank int, prompt []int, tokens, runs int) engineFigures {
	w, err := model.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	m := transformer.New(w)
	cfg := lora.Config{Rank: rank, Alpha: lora.DefaultAlpha}
	cfg.Targets(true, true, true)
	ad, err := lora.New(w.Cfg, cfg)
	if err != nil {
		log.Fatal(err)
	}
	z := m.Freeze(ad)
	var firsts, steps []time.Duration
	var total time.Duration
	ar := transformer.NewArena[float32]()
	for range runs {
		t0 := time.Now()
		s, err := sampler.Start(m, z, sampler.Request{Prompt: prompt, NumSamples: 1, Params: sampler.Params{MaxTokens: tokens, Temperature: 0, TopP: 1, TopK: -1}})
		if err != nil {
			log.Fatal(err)
		}
		firsts = append(firsts, time.Since(t0))
		for !s.Done() {
			t1 := time.Now()
			if err := sampler.Step([]*sampler.Stream{s}, ar); err != nil {
				log.Fatal(err)
			}
			steps = append(steps, time.Since(t1))
		}
		total += time.Since(t0)
	}
	slices.Sort(firsts)
	slices.Sort(steps)
	return engineFigures{service.Percentile(firsts, 0.5), service.Percentile(steps, 0.5), float64(runs*tokens) / total.Seconds()}
}
