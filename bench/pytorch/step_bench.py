"""Times PyTorch training steps of a Freight zoo model's twin (same file, same shapes) on the
CPU: forward, cross-entropy, backward, SGD with momentum. Prints one JSON object.

    /usr/bin/python3 bench/pytorch/step_bench.py --model mlp --batch-size 64 --threads 2

Timing: `--warmup` steps, then `--repeats` rounds of `--steps` steps each; the per-step time of
each round is recorded and the median, min and max reported."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import freight_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", default="sgd")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = freight_models.load_spec(args.model)
    model, shape, dtype = freight_models.build(spec)
    model.train()
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    classes = spec["classes"]
    lm = spec.get("task") == "language_model"
    if dtype == "int64":
        x = torch.randint(0, spec["input"].get("vocab", classes), [args.batch_size] + shape)
    else:
        x = torch.randn([args.batch_size] + shape)
    y = torch.randint(0, classes, [args.batch_size] + (shape if lm else []))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out.reshape(-1, classes), y.reshape(-1)) if lm else loss_fn(out, y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        times.append((time.perf_counter() - t) / args.steps)
    times.sort()
    print(json.dumps({
        "framework": "pytorch", "version": torch.__version__, "model": args.model,
        "batch_size": args.batch_size, "threads": torch.get_num_threads(),
        "blas": os.environ.get("LD_LIBRARY_PATH", "default"),
        "median_ms": 1e3 * times[len(times) // 2], "min_ms": 1e3 * times[0],
        "max_ms": 1e3 * times[-1]}))


if __name__ == "__main__":
    main()
