// Command rl is a reinforcement-learning loop with the Go client: sample
// from the run's current weights, score each completion, and train on the
// advantages with the importance_sampling loss (or ppo). The reward is the
// share of a completion's tokens with even ids (a random model draws about
// half); the program stops with an error unless the mean reward of the last
// group reaches --target.
//
//	WTS_URL=http://127.0.0.1:8080 WTS_API_KEY=$KEY go run ./http/client/examples/rl --model small
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
	iters := flag.Int("iterations", 25, "sample, score and train this many times")
	lr := flag.Float64("lr", 1e-2, "AdamW's learning rate")
	loss := flag.String("loss", "importance_sampling", "importance_sampling or ppo")
	target := flag.Float64("target", 0.9, "the mean reward the last group must reach")
	flag.Parse()
	if err := run(client.FromEnv(), *model, *iters, *lr, *loss, *target); err != nil {
		log.Fatal(err)
	}
}

func run(c *client.Client, model string, iters int, lr float64, lossFn string, target float64) error {
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
	prompt := []int{1, 5, 9}
	const group, length = 16, 8
	var mean float64
	for it := 1; it <= iters; it++ {
		// 1. Sample a group of completions from the current weights (a
		// run-scoped sample saves them for the sampler first).
		seed := int64(it) // reproducible: the same seed draws the same tokens
		f, err := tc.Sample(ctx, client.SampleRequest{Prompt: client.ModelInput{TokenIDs: prompt}, NumSamples: group,
			Parameters: client.SamplingParams{MaxTokens: length, Temperature: 1, TopP: 1, TopK: -1, Seed: &seed}})
		if err != nil {
			return err
		}
		res, err := f.Result(ctx)
		if err != nil {
			return err
		}
		// 2. Score them; the advantage is the reward less the group's mean.
		rewards := make([]float64, len(res.Sequences))
		mean = 0
		for i, s := range res.Sequences {
			for _, t := range s.Tokens {
				if t%2 == 0 {
					rewards[i]++
				}
			}
			rewards[i] /= float64(len(s.Tokens))
			mean += rewards[i] / float64(len(rewards))
		}
		fmt.Printf("iteration %d mean reward %.3f\n", it, mean)
		// 3. Train on them: each datum is prompt + completion, predicting
		// each next token, with the sampler's logprobs and the advantage on
		// the completion's positions (zero on the prompt's).
		var data []client.Datum
		for i, s := range res.Sequences {
			if len(s.Tokens) == 0 {
				continue
			}
			d := client.NextTokenDatum(append(append([]int{}, prompt...), s.Tokens...), nil)
			n := len(d.LossFnInputs.TargetTokens)
			d.LossFnInputs.Logprobs, d.LossFnInputs.Advantages = make([]float64, n), make([]float64, n)
			for k := range s.Tokens {
				pos := len(prompt) - 1 + k
				d.LossFnInputs.Logprobs[pos], d.LossFnInputs.Advantages[pos] = s.Logprobs[k], rewards[i]-mean
			}
			data = append(data, d)
		}
		fb, err := tc.ForwardBackward(ctx, data, lossFn, nil)
		if err != nil {
			return err
		}
		opt, err := tc.OptimStep(ctx, client.AdamParams{LearningRate: lr})
		if err != nil {
			return err
		}
		if _, err := fb.Result(ctx); err != nil {
			return err
		}
		if _, err := opt.Result(ctx); err != nil {
			return err
		}
	}
	if mean < target {
		return fmt.Errorf("mean reward %.3f after %d iterations, below the target %.3f", mean, iters, target)
	}
	return nil
}
