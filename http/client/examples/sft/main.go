// Command sft is a supervised fine-tune with the Go client: a LoRA run
// learns to continue a counting pattern, and the program stops with an
// error unless the loss per token reaches --target.
//
//	WTS_URL=http://127.0.0.1:8080 WTS_API_KEY=$KEY go run ./http/client/examples/sft --model small
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/wts-project/wts/http/client"
)

func main() {
	model := flag.String("model", "small", "the base model (GET /v1/training/models lists them)")
	steps := flag.Int("steps", 40, "optimizer steps")
	lr := flag.Float64("lr", 2e-3, "AdamW's learning rate")
	target := flag.Float64("target", 0.5, "the loss per token the run must reach")
	flag.Parse()
	if err := run(client.FromEnv(), *model, *steps, *lr, *target); err != nil {
		log.Fatal(err)
	}
}

func run(c *client.Client, model string, steps int, lr, target float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sess, err := c.CreateSession(ctx, client.SessionOptions{})
	if err != nil {
		return err
	}
	defer c.CloseSession(context.Background(), sess.ID)
	tc, err := c.CreateLoRATrainingClient(ctx, sess.ID, client.TrainingOptions{BaseModel: model, LoRA: client.LoRA{Rank: 8, Seed: 1}})
	if err != nil {
		return err
	}
	// The task: after 3, 4, 5 comes 6, and so on: windows of 12 counting
	// tokens, starting at 3 to 29.
	var data []client.Datum
	for start := 3; start < 30; start++ {
		var seq []int
		for t := start; t < start+12; t++ {
			seq = append(seq, t)
		}
		data = append(data, client.NextTokenDatum(seq, nil))
	}
	var loss float64
	for step := 1; step <= steps; step++ {
		// Both are durable once submitted: the second is queued behind the
		// first, and only then do we wait for the results.
		fb, err := tc.ForwardBackward(ctx, data, "cross_entropy", nil)
		if err != nil {
			return err
		}
		opt, err := tc.OptimStep(ctx, client.AdamParams{LearningRate: lr})
		if err != nil {
			return err
		}
		out, err := fb.Result(ctx)
		if err != nil {
			return err
		}
		if _, err := opt.Result(ctx); err != nil {
			return err
		}
		loss = out.Metrics["loss:sum"] / out.Metrics["tokens:sum"]
		fmt.Printf("step %d loss/token %.4f\n", step, loss)
	}
	// Greedy continuation from the trained weights.
	res, err := tc.Sample(ctx, client.SampleRequest{Prompt: client.ModelInput{TokenIDs: []int{10, 11, 12}}, NumSamples: 1,
		Parameters: client.SamplingParams{MaxTokens: 5, Temperature: 0, TopP: 1, TopK: -1}})
	if err != nil {
		return err
	}
	sample, err := res.Result(ctx)
	if err != nil {
		return err
	}
	fmt.Println("10 11 12 →", sample.Sequences[0].Tokens)
	if loss > target {
		return fmt.Errorf("loss per token %.4f after %d steps, above the target %.4f", loss, steps, target)
	}
	return nil
}
