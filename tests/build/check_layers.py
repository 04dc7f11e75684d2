#!/usr/bin/env python3
"""Checks that every `#include "..."` of the repository points down the layer order.

Data flows one way through Freight (docs/internals.md, "Layout"): the core (tensor, storage,
kernel slots, autograd) at the bottom, the ops on it, the backends filling the ops' kernel slots,
nn, optim, data and io on the ops, training on those, the tooling (profile, bench) on the
engine, and the command, the benchmarks and the tests on top. A file may include files of its own
layer and of the layers its entry in ALLOWED names, nothing else: an include against the flow
makes a lower layer depend on a higher one (a cycle in the libraries, or the engine library
dragging the tooling in). Prints one line per bad include, naming the file, the include and the
two layers, and exits 1; exits 0 when there is none.

Usage: check_layers.py [REPO_ROOT]   (default: two directories above this script)
"""

import pathlib
import re
import sys

# The allowed order, written down once: each layer and the layers it may include (besides its
# own). Backends sit beside nn/optim/data/io, not below them: nothing in the engine includes a
# backend, which only registers kernels into the ops' slots.
ENGINE = ["core", "ops", "backend", "io", "nn", "optim", "data", "dist", "training"]
TOOLING = ["profile", "bench-tools"]
ALLOWED = {
    "core": [],
    "ops": ["core"],
    "backend": ["core", "ops"],
    "io": ["core"],
    "nn": ["core", "ops", "io"],
    "optim": ["core", "ops"],
    "data": ["core", "ops", "io"],  # bytes on disk (io) -> dataset -> loader
    # The processes of a data-parallel job (MPI): ranks, collectives, the gradient reducer.
    "dist": ["core", "ops"],
    "training": ["core", "ops", "io", "nn", "optim", "data", "dist"],
    "profile": ENGINE,
    "bench-tools": ENGINE + ["profile"],
    "command": ENGINE + TOOLING,
    "benchmarks": ENGINE + TOOLING,
    "tests": ENGINE + TOOLING + ["command", "benchmarks"],
}

# Public headers belong to the layer that implements them.
PUBLIC_HEADERS = {
    "freight/error.h": "core",
    "freight/dtype.h": "core",
    "freight/shape.h": "core",
    "freight/device.h": "core",
    "freight/tensor.h": "core",
    "freight/autograd.h": "core",
    "freight/random.h": "core",
    "freight/runtime.h": "core",
    "freight/profiler.h": "core",
    "freight/ops.h": "ops",
    "freight/unary_ops.h": "ops",  # the unary ops' descriptor rows
    # The affine map the data kernels apply (a kernel argument), below the loader.
    "freight/data/normalisation.h": "ops",
    "freight/dist.h": "dist",
    "freight/training.h": "training",
    "freight/settings.h": "training",
    "freight/freight.h": "training",  # the umbrella header of the engine's public API
    "freight/peaks.h": "profile",
    "freight/explain.h": "profile",
    "freight/plan.h": "profile",
}
PUBLIC_DIRS = {"freight/io/": "io", "freight/nn/": "nn", "freight/optim/": "optim",
               "freight/data/": "data"}
SOURCE_DIRS = {"src/core/": "core", "src/ops/": "ops", "src/backend/": "backend",
               "src/io/": "io", "src/nn/": "nn", "src/optim/": "optim", "src/data/": "data",
               "src/dist/": "dist",
               "src/training/": "training", "src/profile/": "profile",
               "src/bench/": "bench-tools", "tools/": "command", "bench/": "benchmarks",
               "tests/": "tests"}
# Where a quoted include is looked up after the including file's own directory (the include
# directories of the build).
SEARCH_ROOTS = ["src", "include", "tests", "tools"]
SCANNED = ["src", "include", "tools", "bench", "tests"]
EXTENSIONS = {".h", ".hpp", ".cuh", ".cpp", ".cc", ".cu", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a repository-relative path, or None for a file outside the layers."""
    if rel.startswith("include/"):
        header = rel[len("include/"):]
        if header in PUBLIC_HEADERS:
            return PUBLIC_HEADERS[header]
        for prefix, layer in PUBLIC_DIRS.items():
            if header.startswith(prefix):
                return layer
        return None
    for prefix, layer in SOURCE_DIRS.items():
        if rel.startswith(prefix):
            return layer
    return None


def resolve(root, source, name):
    """The repository-relative path an include names, or None (a system or generated file)."""
    for base in [source.parent] + [root / r for r in SEARCH_ROOTS]:
        candidate = (base / name).resolve()
        if candidate.is_file() and root in candidate.parents:
            return candidate.relative_to(root).as_posix()
    return None


def main():
    root = (pathlib.Path(sys.argv[1]) if len(sys.argv) > 1
            else pathlib.Path(__file__).resolve().parents[2]).resolve()
    unknown = set(ALLOWED) - set(ENGINE + TOOLING + ["command", "benchmarks", "tests"])
    assert not unknown, f"layers without a place in the order: {unknown}"
    bad = []
    checked = 0
    for top in SCANNED:
        for source in sorted((root / top).rglob("*")):
            if source.suffix not in EXTENSIONS or not source.is_file():
                continue
            rel = source.relative_to(root).as_posix()
            layer = layer_of(rel)
            if layer is None:
                continue
            text = source.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, source, m.group(1))
                target_layer = layer_of(target) if target else None
                if target_layer is None:
                    continue
                checked += 1
                if target_layer != layer and target_layer not in ALLOWED[layer]:
                    bad.append(f"{rel}:{number}: includes \"{m.group(1)}\" ({target}): "
                               f"{layer} must not depend on {target_layer}")
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) against the layer order (tests/build/check_layers.py, "
              "docs/internals.md)")
        return 1
    print(f"{checked} includes checked, all down the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
