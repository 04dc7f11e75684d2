"""Evaluates a Freight checkpoint with PyTorch: builds the twin of the model stored in the
checkpoint, loads the weights (strict), and prints the test accuracy on an IDX dataset as JSON.

    /usr/bin/python3 bench/pytorch/eval_checkpoint.py CHECKPOINT IMAGES_IDX LABELS_IDX MEAN STD [LIMIT]
"""
import gzip
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import freight_checkpoint  # noqa: E402
import freight_models  # noqa: E402


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    ckpt, images, labels, mean, std = sys.argv[1:6]
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    state, meta = freight_checkpoint.load_checkpoint(ckpt)
    spec = json.loads(meta["model_spec"])
    model, shape, _ = freight_models.build(spec)
    model.load_state_dict(state, strict=True)
    model.eval()
    x = read_idx(images).astype(np.float32)
    y = read_idx(labels).astype(np.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    x = (x / 255.0 - float(mean)) / float(std)
    x = torch.from_numpy(x.astype(np.float32)).reshape([len(y)] + shape)
    correct = 0
    loss = 0.0
    with torch.no_grad():
        for i in range(0, len(y), 1000):
            out = model(x[i:i + 1000])
            t = torch.from_numpy(y[i:i + 1000])
            loss += torch.nn.functional.cross_entropy(out, t, reduction="sum").item()
            correct += (out.argmax(1) == t).sum().item()
    print(json.dumps({"samples": len(y), "accuracy": correct / len(y), "loss": loss / len(y)}))


if __name__ == "__main__":
    main()
