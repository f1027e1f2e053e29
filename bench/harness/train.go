package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/wts-project/wts/http/client"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
)

// TrainConfig is the training benchmark (`wts bench train`): Steps steps
// of one run, each a forward_backward of Batch sequences of Seq tokens
// (cross-entropy) and an optim_step, the LoRA adapter of rank Rank on the
// attention and MLP projections.
type TrainConfig struct {
	Model                   string
	Batch, Seq, Rank, Steps int
	Seed                    uint64
}

// TrainFigures are a training loop's figures.
type TrainFigures struct {
	TokensPerS float64   `json:"tokens_per_s"` // forward_backward tokens over the whole loop's time
	Step       Quantiles `json:"step"`         // forward_backward and optim_step together
}

// TrainReport is the training benchmark: through the API, and the engine
// alone on the same model and batches when the harness has the model's
// folder.
type TrainReport struct {
	Model  string        `json:"model"`
	Batch  int           `json:"batch"`
	Seq    int           `json:"seq"`
	Rank   int           `json:"lora_rank"`
	Steps  int           `json:"steps"`
	API    TrainFigures  `json:"api"`
	Engine *TrainFigures `json:"engine_alone,omitempty"`
	Provenance
	Overhead float64 `json:"api_over_engine,omitempty"` // API tokens/s over the engine's
}

// batches are the benchmark's token sequences, Seq+1 tokens each (inputs
// and their next-token targets), the same for the API and the engine.
func (c *TrainConfig) batches(vocab int) [][][]int {
	rng := rand.New(rand.NewPCG(c.Seed, 0))
	out := make([][][]int, c.Steps)
	for s := range out {
		for range c.Batch {
			seq := make([]int, c.Seq+1)
			for i := range seq {
				seq[i] = rng.IntN(vocab)
			}
			out[s] = append(out[s], seq)
		}
	}
	return out
}

func (c *TrainConfig) check(maxSeq int) error {
	if c.Batch < 1 || c.Seq < 1 || c.Rank < 1 || c.Steps < 1 {
		return fmt.Errorf("batch, seq, rank and steps must be at least 1")
	}
	if c.Seq > maxSeq {
		return fmt.Errorf("seq %d: the model's context is %d", c.Seq, maxSeq)
	}
	return nil
}

// RunTrain measures cfg's training loop through c: a run of its own, each
// step's forward_backward and optim_step submitted together (as a client
// that pipelines them) and the step timed until the optim_step's result.
// The first step is a warm-up and not counted.
func RunTrain(ctx context.Context, c *client.Client, cfg TrainConfig) (*TrainReport, error) {
	m, err := c.Model(ctx, cfg.Model)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(m.MaxSeqLen); err != nil {
		return nil, err
	}
	s, err := c.CreateSession(ctx, client.SessionOptions{RequestID: fmt.Sprintf("bench-train-%d", time.Now().UnixNano()), IdleTTLSeconds: 3600})
	if err != nil {
		return nil, err
	}
	defer c.CloseSession(context.Background(), s.ID)
	yes, no := true, false
	tc, err := c.CreateLoRATrainingClient(ctx, s.ID, client.TrainingOptions{RequestID: "run", BaseModel: m.Name, ModelRevision: m.Revision,
		LoRA: client.LoRA{Rank: cfg.Rank, Seed: int64(cfg.Seed), TrainAttn: &yes, TrainMLP: &yes, TrainUnembed: &no}})
	if err != nil {
		return nil, err
	}
	var steps []float64
	var total time.Duration
	bs := cfg.batches(m.VocabSize)
	for i, b := range append([][][]int{bs[0]}, bs...) {
		data := make([]client.Datum, len(b))
		for j, seq := range b {
			data[j] = client.NextTokenDatum(seq, nil)
		}
		t0 := time.Now()
		fb, err := tc.ForwardBackward(ctx, data, "cross_entropy", nil)
		if err != nil {
			return nil, err
		}
		opt, err := tc.OptimStep(ctx, client.AdamParams{LearningRate: 1e-4})
		if err != nil {
			return nil, err
		}
		if _, err := fb.Result(ctx); err != nil {
			return nil, fmt.Errorf("forward_backward: %w", err)
		}
		if _, err := opt.Result(ctx); err != nil {
			return nil, fmt.Errorf("optim_step: %w", err)
		}
		if i > 0 { // the first is the warm-up
			d := time.Since(t0)
			steps, total = append(steps, ms(d)), total+d
		}
	}
	return &TrainReport{Model: m.Name, Batch: cfg.Batch, Seq: cfg.Seq, Rank: cfg.Rank, Steps: cfg.Steps,
		API: figures(cfg, steps, total), Provenance: Begin()}, nil
}

// EngineTrain runs cfg's loop on the engine alone, in process, on the
// model folder dir: the same batches, adapter shape and optimiser.
func EngineTrain(dir string, cfg TrainConfig) (*TrainFigures, error) {
	w, err := model.Load(dir)
	if err != nil {
		return nil, err
	}
	lc := lora.Config{Rank: cfg.Rank, Alpha: lora.DefaultAlpha, Seed: cfg.Seed}
	lc.Targets(true, true, false)
	ad, err := lora.New(w.Cfg, lc)
	if err != nil {
		return nil, err
	}
	tr := train.NewTrainer(transformer.New(w), ad)
	p := optim.Defaults()
	p.LR = 1e-4
	var steps []float64
	var total time.Duration
	bs := cfg.batches(w.Cfg.Vocab)
	for i, b := range append([][][]int{bs[0]}, bs...) {
		data := make([]train.Datum, len(b))
		for j, seq := range b {
			data[j] = train.Datum{ModelInput: seq[:len(seq)-1], Loss: loss.Inputs{TargetTokens: seq[1:]}}
		}
		t0 := time.Now()
		if _, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil); err != nil {
			return nil, err
		}
		if _, err := tr.OptimStep(p); err != nil {
			return nil, err
		}
		if i > 0 {
			d := time.Since(t0)
			steps, total = append(steps, ms(d)), total+d
		}
	}
	f := figures(cfg, steps, total)
	return &f, nil
}

// figures sums up a loop's step times.
func figures(cfg TrainConfig, steps []float64, total time.Duration) TrainFigures {
	slices.Sort(steps)
	return TrainFigures{TokensPerS: float64(cfg.Steps*cfg.Batch*cfg.Seq) / total.Seconds(), Step: quantiles(steps)}
}

// Describe fills in where and how the report was made, and the API's
// pace over the engine's.
func (r *TrainReport) Describe(command string) {
	r.Provenance.Describe(command)
	if r.Engine != nil && r.Engine.TokensPerS > 0 {
		r.Overhead = r.API.TokensPerS / r.Engine.TokensPerS
	}
}

// Markdown is the report as a heading, its conditions and one table.
func (r *TrainReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Training: %s\n\n", r.Model)
	fmt.Fprintf(&b, "%d steps (after one warm-up), each a forward_backward of %d sequences of %d tokens (cross-entropy) and an optim_step; LoRA rank %d on attention and MLP.\n\n",
		r.Steps, r.Batch, r.Seq, r.Rank)
	r.Provenance.markdown(&b)
	b.WriteString("| | tokens/s | step p50 / p90 / p99 ms |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| through the API | %.1f | %s |\n", r.API.TokensPerS, r.API.Step)
	if e := r.Engine; e != nil {
		fmt.Fprintf(&b, "| the engine alone | %.1f | %s |\n", e.TokensPerS, e.Step)
		fmt.Fprintf(&b, "\nThrough the API: %.2f× the engine's tokens/s.\n", r.Overhead)
	}
	return b.String()
}

// Write writes the report into dir: JSONFile and MDFile.
func (r *TrainReport) Write(dir string) error { return writeTables(dir, r, r.Markdown()) }
