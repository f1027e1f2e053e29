"""Supervised fine-tuning with the Python client: a LoRA run learns to
continue a counting pattern; exits non-zero unless the loss per token
reaches --target.

    WTS_URL=http://127.0.0.1:8080 WTS_API_KEY=$KEY python3 examples/sft.py --model small
"""

import argparse
import sys

from wts_client import AdamParams, SamplingParams, ServiceClient, next_token_datum


def run(service, model, steps=40, learning_rate=2e-3):
    # The task: after 3, 4, 5 comes 6, and so on: windows of 12 counting
    # tokens, starting at 3 to 29.
    data = [next_token_datum(range(start, start + 12)) for start in range(3, 30)]
    with service.create_lora_training_client(model, rank=8, seed=1) as training:
        loss = None
        for step in range(1, steps + 1):
            # Both are durable once submitted: the optimizer step is queued
            # behind the forward-backward, and only then do we wait.
            fb = training.forward_backward(data, "cross_entropy")
            opt = training.optim_step(AdamParams(learning_rate=learning_rate))
            metrics = fb.result().metrics
            opt.result()
            loss = metrics["loss:sum"] / metrics["tokens:sum"]
            print("step %d loss/token %.4f" % (step, loss))
        greedy = training.sample([10, 11, 12], sampling_params=SamplingParams(max_tokens=5, temperature=0.0)).result()
        print("10 11 12 ->", greedy.sequences[0].tokens)
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small", help="the base model (GET /v1/training/models lists them)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=2e-3, help="AdamW's learning rate")
    ap.add_argument("--target", type=float, default=0.5, help="the loss per token the run must reach")
    args = ap.parse_args()
    loss = run(ServiceClient(), args.model, args.steps, args.lr)
    if loss > args.target:
        sys.exit("loss per token %.4f after %d steps, above the target %.4f" % (loss, args.steps, args.target))


if __name__ == "__main__":
    main()
