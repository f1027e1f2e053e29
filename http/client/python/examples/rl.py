"""Reinforcement learning with the Python client: sample a group of
completions from the run's current weights, score them, and train on the
advantages with the importance_sampling loss (or ppo). The reward is the
share of a completion's tokens with even ids (a random model draws about
half); exits non-zero unless the last group's mean reward reaches
--target.

    WTS_URL=http://127.0.0.1:8080 WTS_API_KEY=$KEY python3 examples/rl.py --model small
"""

import argparse
import sys

from wts_client import AdamParams, SamplingParams, ServiceClient, next_token_datum


def run(service, model, iterations=25, learning_rate=1e-2, loss_fn="importance_sampling"):
    prompt, group, length = [1, 5, 9], 16, 8
    mean = 0.0
    with service.create_lora_training_client(model, rank=8, seed=1) as training:
        for it in range(1, iterations + 1):
            # 1. A group of completions of the current weights.
            res = training.sample(prompt, num_samples=group, sampling_params=SamplingParams(max_tokens=length, temperature=1.0, seed=it)).result()
            # 2. Their rewards; the advantage is the reward less the mean.
            rewards = [sum(t % 2 == 0 for t in s.tokens) / max(1, len(s.tokens)) for s in res.sequences]
            mean = sum(rewards) / len(rewards)
            print("iteration %d mean reward %.3f" % (it, mean))
            # 3. Train on prompt + completion, with the sampler's logprobs and
            # the advantage on the completion's positions, zero on the prompt's.
            data = []
            for s, r in zip(res.sequences, rewards):
                if not s.tokens:
                    continue
                d = next_token_datum(prompt + s.tokens)
                n = len(d.loss_fn_inputs["target_tokens"])
                lps, adv = [0.0] * n, [0.0] * n
                for k, lp in enumerate(s.logprobs):
                    lps[len(prompt) - 1 + k], adv[len(prompt) - 1 + k] = lp, r - mean
                d.loss_fn_inputs.update(logprobs=lps, advantages=adv)
                data.append(d)
            fb = training.forward_backward(data, loss_fn)
            opt = training.optim_step(AdamParams(learning_rate=learning_rate))
            fb.result()
            opt.result()
    return mean


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small", help="the base model (GET /v1/training/models lists them)")
    ap.add_argument("--iterations", type=int, default=25)
    ap.add_argument("--lr", type=float, default=1e-2, help="AdamW's learning rate")
    ap.add_argument("--loss", default="importance_sampling", choices=["importance_sampling", "ppo"])
    ap.add_argument("--target", type=float, default=0.9, help="the mean reward the last group must reach")
    args = ap.parse_args()
    mean = run(ServiceClient(), args.model, args.iterations, args.lr, args.loss)
    if mean < args.target:
        sys.exit("mean reward %.3f after %d iterations, below the target %.3f" % (mean, args.iterations, args.target))


if __name__ == "__main__":
    main()
