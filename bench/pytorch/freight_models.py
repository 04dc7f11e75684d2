"""Builds the PyTorch twin of a Freight model file (models/*.json), layer for layer, so that
state_dict names and shapes match Freight's checkpoints and benchmarks compare identical
networks. Used by the side-by-side benchmarks and the checkpoint interop test."""
import json
import os
import re

import torch
from torch import nn


def _activations():
    """{model-file type: torch.nn class name} from the activation rows of Freight's op
    descriptors (include/freight/unary_ops.h: A(Enum, name, Saves, bwd_flops, Layer)), whose
    layer names are the torch.nn class names: a new activation needs no change here."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                          "freight", "unary_ops.h")
    with open(header, encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\s*A\((\w+),\s*(\w+),\s*\w+,\s*[\d.]+,\s*(\w+)\)", text, re.M)
    if not rows:
        raise RuntimeError(f"no activation rows found in {header}")
    return {name: layer for _, name, layer in rows}


ACTIVATIONS = _activations()


class Residual(nn.Module):
    """body(x) + shortcut(x); shortcut is the identity when the file gives none."""

    def __init__(self, body, shortcut):
        super().__init__()
        self.body = body
        if shortcut is not None:
            self.shortcut = shortcut
        self.has_shortcut = shortcut is not None

    def forward(self, x):
        return self.body(x) + (self.shortcut(x) if self.has_shortcut else x)


class LSTMSeq(nn.LSTM):
    """Batch-first LSTM returning only the output sequence (Freight's LSTM layer)."""

    def forward(self, x):
        return super().forward(x)[0]


class LastStep(nn.Module):
    def forward(self, x):
        return x[:, -1, :]


class Reshape(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        return x.reshape((x.shape[0],) + self.shape)


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _build_layers(layers, shape):
    """Returns (nn.Sequential, output per-sample shape) for a list of layer specs."""
    mods = []
    for spec in _expand(layers):
        m, shape = _build_layer(spec, shape)
        mods.append(m)
    return nn.Sequential(*mods), shape


def _expand(layers):
    """Inlines {"type": "repeat", "times": n, "layers": [...]} blocks (n copies, in order)."""
    out = []
    for spec in layers:
        if spec["type"] == "repeat":
            for _ in range(spec["times"]):
                out.extend(_expand(spec["layers"]))
        else:
            out.append(spec)
    return out


def _build_layer(spec, shape):
    t = spec["type"]
    if t == "linear":
        m = nn.Linear(shape[-1], spec["out"], bias=spec.get("bias", True))
        return m, shape[:-1] + [spec["out"]]
    if t == "conv2d":
        k, s = _pair(spec["kernel"]), _pair(spec.get("stride", 1))
        p, d = _pair(spec.get("padding", 0)), _pair(spec.get("dilation", 1))
        m = nn.Conv2d(shape[0], spec["out"], k, s, p, d, bias=spec.get("bias", True))
        h = (shape[1] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
        w = (shape[2] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
        return m, [spec["out"], h, w]
    if t in ("maxpool2d", "avgpool2d"):
        k = _pair(spec["kernel"])
        s = _pair(spec.get("stride", spec["kernel"]))
        p = _pair(spec.get("padding", 0))
        m = nn.MaxPool2d(k, s, p) if t == "maxpool2d" else nn.AvgPool2d(k, s, p)
        h = (shape[1] + 2 * p[0] - k[0]) // s[0] + 1
        w = (shape[2] + 2 * p[1] - k[1]) // s[1] + 1
        return m, [shape[0], h, w]
    if t in ("batchnorm", "batchnorm1d", "batchnorm2d"):
        eps, mom = spec.get("eps", 1e-5), spec.get("momentum", 0.1)
        m = nn.BatchNorm2d(shape[0], eps, mom) if len(shape) == 3 else nn.BatchNorm1d(shape[0], eps, mom)
        return m, shape
    if t == "dropout":
        return nn.Dropout(spec.get("p", 0.5)), shape
    if t in ACTIVATIONS:
        return getattr(nn, ACTIVATIONS[t])(), shape
    if t == "flatten":
        n = 1
        for v in shape:
            n *= v
        return nn.Flatten(), [n]
    if t == "reshape":
        return Reshape(spec["shape"]), list(spec["shape"])
    if t == "embedding":
        return nn.Embedding(spec["num"], spec["dim"]), shape + [spec["dim"]]
    if t == "lstm":
        m = LSTMSeq(shape[-1], spec["hidden"], spec.get("layers", 1), batch_first=True)
        return m, shape[:-1] + [spec["hidden"]]
    if t == "last_step":
        return LastStep(), shape[1:]
    if t == "residual":
        body, out = _build_layers(spec["body"], shape)
        shortcut = None
        if spec.get("shortcut"):
            shortcut, _ = _build_layers(spec["shortcut"], shape)
        return Residual(body, shortcut), out
    if t == "sequential":
        return _build_layers(spec["layers"], shape)
    raise ValueError(f"unknown layer type {t!r}")


def models_dirs():
    """Where a zoo name is looked for, as the engine does: FREIGHT_MODEL_PATH (colon-separated),
    FREIGHT_MODELS_DIR (its older name), then this source tree's models/."""
    dirs = [d for d in os.environ.get("FREIGHT_MODEL_PATH", "").split(":") if d]
    if os.environ.get("FREIGHT_MODELS_DIR"):
        dirs.append(os.environ["FREIGHT_MODELS_DIR"])
    return dirs + [os.path.join(os.path.dirname(__file__), "..", "..", "models")]


def load_spec(name_or_path):
    path = name_or_path
    if not name_or_path.endswith(".json"):
        candidates = [os.path.join(d, name_or_path + ".json") for d in models_dirs()]
        path = next((p for p in candidates if os.path.exists(p)), candidates[-1])
    with open(path) as f:
        return json.load(f)


def build(spec):
    """The PyTorch model of a parsed model file, and its per-sample input shape and dtype."""
    shape = list(spec["input"]["shape"])
    model, _ = _build_layers(spec["layers"], shape)
    return model, shape, spec["input"].get("dtype", "float32")
