#!/usr/bin/env python3
"""The resource budget of every CUDA kernel, as ptxas reported it when the backend was built.

    check_kernel_resources.py OBJECT_DIR [--max-registers N] [--max-shared BYTES]
                              [--max-stack BYTES]

Reads the <object>.resources files that tools/build/nvcc-resource-log leaves beside each object
of the CUDA backend and fails, naming the kernel, its source and the figure, when a kernel
spills registers to local memory, needs a stack frame above --max-stack, uses more registers
than --max-registers (at 255 a kernel has hit the hardware's ceiling, and past 64 a block of
1024 threads cannot launch on sm_90's 64K registers per multiprocessor) or more static shared
memory than --max-shared (48 KiB is what a block gets without opting in). Exits 1 on a breach,
2 when there is nothing to read (the check must not pass by finding no kernels).
"""
import argparse
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(.*)")
SMEM = re.compile(r"(\d+) bytes smem")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
        if len(out) == len(names):
            return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        pass
    return {n: n for n in names}


def parse(path):
    """Kernels of one .resources file: name -> dict(stack, spill_stores, spill_loads, registers,
    shared). Device functions (non-kernels) have properties but no 'Used' line of their own."""
    kernels, current = {}, None
    for line in open(path):
        m = ENTRY.search(line)
        if m:
            current = m.group(1)
            kernels.setdefault(current, {})
            continue
        if current is None:
            continue
        m = FRAME.search(line)
        if m:
            kernels[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                    spill_loads=int(m.group(3)))
            continue
        m = USED.search(line)
        if m:
            s = SMEM.search(m.group(2))
            kernels[current].update(registers=int(m.group(1)), shared=int(s.group(1)) if s else 0)
            current = None
    return {k: v for k, v in kernels.items() if "registers" in v}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("object_dir")
    ap.add_argument("--max-registers", type=int, default=128)
    ap.add_argument("--max-shared", type=int, default=48 * 1024)
    ap.add_argument("--max-stack", type=int, default=0)
    args = ap.parse_args()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.object_dir) for f in fs
                   if f.endswith(".cu.o.resources"))
    if not files:
        print(f"check_kernel_resources: no .cu.o.resources files under {args.object_dir} "
              "(was the backend built through tools/build/nvcc-resource-log?)")
        return 2
    rows = []
    for f in files:
        source = os.path.basename(f)[: -len(".o.resources")]
        for name, k in parse(f).items():
            rows.append((source, name, k))
    if not rows:
        print("check_kernel_resources: the .resources files name no kernels")
        return 2
    names = demangle([r[1] for r in rows])
    breaches = []
    for source, name, k in rows:
        what = f"{source}: {names[name]}"
        if k.get("spill_stores", 0) or k.get("spill_loads", 0):
            breaches.append(f"{what}: spills ({k['spill_stores']} bytes stored, "
                            f"{k['spill_loads']} loaded)")
        if k.get("stack", 0) > args.max_stack:
            breaches.append(f"{what}: a {k['stack']}-byte stack frame (limit {args.max_stack})")
        if k["registers"] > args.max_registers:
            breaches.append(f"{what}: {k['registers']} registers (limit {args.max_registers})")
        if k["shared"] > args.max_shared:
            breaches.append(f"{what}: {k['shared']} bytes of static shared memory "
                            f"(limit {args.max_shared})")
    most = max(rows, key=lambda r: r[2]["registers"])
    print(f"check_kernel_resources: {len(rows)} kernels in {len(files)} files; most registers "
          f"{most[2]['registers']} ({names[most[1]]}); most shared memory "
          f"{max(r[2]['shared'] for r in rows)} bytes; largest stack frame "
          f"{max(r[2].get('stack', 0) for r in rows)} bytes")
    for b in breaches:
        print("  " + b)
    if breaches:
        print(f"check_kernel_resources: {len(breaches)} breaches of the budget")
        return 1
    print("check_kernel_resources: every kernel within the budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
