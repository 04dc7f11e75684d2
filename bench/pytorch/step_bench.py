"""Times PyTorch training steps of a Freight zoo model's twin (same file, same shapes): forward,
cross-entropy, backward, SGD with momentum (or Adam), and optionally the batch-1 inference
latency (forward only, eval mode, no grad). Prints one JSON object.

    /usr/bin/python3 bench/pytorch/step_bench.py --model mlp --batch-size 64 --threads 2
    /usr/bin/python3 bench/pytorch/step_bench.py --model mlp --seconds 1 --latency

Timing, fixed (the default): `--warmup` steps, then `--repeats` rounds of `--steps` steps each;
the per-step time of each round is recorded and the median, min and max reported.

Timing, adaptive (`--seconds S`, what `freight bench` uses; the same rule as Freight's side in
src/bench/timing.cpp): the first step is timed alone and the row is skipped when it exceeds
`--max-step-seconds`; warm-up continues until at least 2 steps and `--warmup-seconds` have
passed; the warm-up steps after the first estimate the step time t; then R rounds of N steps,
R = 5 (fewer when 5 rounds of one step would exceed S, but never fewer than `--min-rounds`) and
N = max(1, round(S / (R t))).

`--serve` turns the script into a worker for `freight bench --vs pytorch`: it prints a hello
line (versions, the BLAS library torch loaded and its kernels, CUDA, torch.compile), then reads
one JSON request per line on stdin (the options above as keys: model, batch_size, threads,
device, compile, seconds, ...) and answers each with one JSON line, until end of input. Models
are rebuilt for every request from the same seed.

Threads: torch.set_num_threads(n), and, when torch's BLAS is OpenBLAS, openblas_set_num_threads(n)
too (Debian's torch calls the BLAS through libblas.so.3; the pthread flavour of OpenBLAS keeps its
own thread pool, which torch.set_num_threads does not reach)."""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import freight_models  # noqa: E402


# ---- the BLAS that torch uses ----

def _loaded_blas_path():
    """Path of the BLAS shared library mapped into this process (libblas/libopenblas), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if base.startswith(("libopenblas", "libblas", "libmkl_rt", "libblis")):
                    return path
    except OSError:
        pass
    return None


class Blas:
    """The BLAS library torch loaded, and OpenBLAS's thread and kernel queries when it is one."""

    def __init__(self):
        self.path = _loaded_blas_path()
        self.lib = None
        if self.path:
            try:
                self.lib = ctypes.CDLL(self.path)  # already loaded: the same handle
            except OSError:
                self.lib = None

    def _fn(self, name, restype):
        f = getattr(self.lib, name, None) if self.lib is not None else None
        if f is not None:
            f.restype = restype
        return f

    def info(self):
        d = {"library": self.path or "unknown"}
        for key, name in (("config", "openblas_get_config"), ("kernels", "openblas_get_corename")):
            f = self._fn(name, ctypes.c_char_p)
            if f is not None:
                d[key] = f().decode()
        if "openblas-openmp" in (self.path or ""):
            d["flavour"] = "openblas-openmp"
        elif "openblas-pthread" in (self.path or ""):
            d["flavour"] = "openblas-pthread"
        elif self.path is None:
            # PyPI's wheels link their BLAS in (MKL on x86-64); convolutions go to oneDNN.
            d["flavour"] = "built-in MKL" if torch.backends.mkl.is_available() else "built-in BLAS"
        return d

    def set_threads(self, n):
        f = self._fn("openblas_set_num_threads", None)
        if f is not None:
            f(ctypes.c_int(n))

    def threads(self):
        f = self._fn("openblas_get_num_threads", ctypes.c_int)
        return f() if f is not None else None


def hello(blas):
    cuda = torch.cuda.is_available()
    return {
        "framework": "pytorch", "version": torch.__version__, "python": sys.version.split()[0],
        "blas": blas.info(), "cpu_capability": torch.backends.cpu.get_cpu_capability()
        if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability")
        else None,
        "cuda": cuda, "cuda_devices": [torch.cuda.get_device_name(i)
                                       for i in range(torch.cuda.device_count())] if cuda else [],
        "compile": hasattr(torch, "compile"), "threads": torch.get_num_threads(),
        "cpu_count": len(os.sched_getaffinity(0)),
        "env": {k: os.environ[k] for k in ("LD_LIBRARY_PATH", "MALLOC_TRIM_THRESHOLD_",
                                           "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                                           "OPENBLAS_CORETYPE", "OMP_NUM_THREADS")
                if k in os.environ},
    }


# ---- timing ----

def adaptive_times(step, sync, seconds, min_rounds, warmup_seconds, max_step_seconds):
    """Per-step times of each round, following the rule in the module docstring. Returns
    (times, info) or raises Skip when one step is over max_step_seconds."""
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    if max_step_seconds > 0 and first > max_step_seconds:
        raise Skip(f"one step took {first:.2f} s, over the limit of {max_step_seconds:g} s",
                   first)
    warm, warm_time, after_first = 1, first, []
    while warm < 2 or warm_time < warmup_seconds:
        t = time.perf_counter()
        step()
        sync()
        dt = time.perf_counter() - t
        after_first.append(dt)
        warm += 1
        warm_time += dt
    est = statistics.mean(after_first)
    rounds = 5
    if rounds * est > seconds:
        rounds = max(min_rounds, int(seconds / est))
    rounds = max(rounds, min_rounds)
    per_round = max(1, round(seconds / (rounds * est)))
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(per_round):
            step()
        sync()
        times.append((time.perf_counter() - t) / per_round)
    return times, {"rounds": rounds, "steps_per_round": per_round, "warmup_steps": warm,
                   "first_step_ms": 1e3 * first}


def fixed_times(step, sync, warmup, steps, repeats):
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - t) / steps)
    return times, {"rounds": repeats, "steps_per_round": steps, "warmup_steps": warmup}


def latency_times(forward, sync, seconds):
    """Each forward call timed alone (synchronised on a GPU): 3 warm-up calls, then enough calls
    for about `seconds` (at least 10, at most 2000)."""
    for _ in range(3):
        forward()
    sync()
    t = time.perf_counter()
    forward()
    sync()
    est = max(time.perf_counter() - t, 1e-7)
    n = int(min(2000, max(10, seconds / est)))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        forward()
        sync()
        times.append(time.perf_counter() - t)
    return times


class Skip(Exception):
    def __init__(self, reason, first):
        super().__init__(reason)
        self.reason = reason
        self.first = first


# ---- resident memory (the CPU's peak memory) ----

def _status_bytes(field):
    """A size line of /proc/self/status (VmRSS, VmHWM) in bytes, or None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rss_baseline():
    """Frees what earlier rows left (the worker serves several), resets the resident set's
    high-water mark to the present (Linux: 5 > /proc/self/clear_refs) and returns the resident
    set, or None where the mark cannot be reset."""
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed heap pages otherwise
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_bytes("VmRSS")


# ---- one benchmark ----

def run(req, blas):
    """Runs one request (a dict of the command-line options) and returns the result dict."""
    model_name = req["model"]
    batch = int(req.get("batch_size", 64))
    threads = int(req.get("threads", 0))
    device = req.get("device", "cpu")
    use_compile = bool(req.get("compile", False))
    precision = req.get("precision", "fp32")
    if precision != "fp32":
        raise ValueError(f"precision {precision!r}: only fp32 is implemented")
    if threads > 0:
        torch.set_num_threads(threads)
        blas.set_threads(threads)
    dev = torch.device(device)
    if dev.type == "cuda":
        def sync():
            torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    else:
        def sync():
            pass
    # On the CPU the peak is the growth of the resident set during the row: the model, the data,
    # the gradients, the optimizer's state, the activations, and whatever the allocator and the
    # libraries keep beside them.
    rss_base = _rss_baseline() if dev.type == "cpu" else None

    torch.manual_seed(0)
    spec = freight_models.load_spec(model_name)
    model, shape, dtype = freight_models.build(spec)
    model.to(dev)
    model.train()
    lr = float(req.get("lr", 0.01))
    if req.get("optimizer", "sgd") == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    classes = spec["classes"]
    lm = spec.get("task") == "language_model"
    if dtype == "int64":
        vocab = spec["input"].get("vocab", classes)
        x = torch.randint(0, vocab, [batch] + shape, device=dev)
        x1 = torch.randint(0, vocab, [1] + shape, device=dev)
    else:
        x = torch.randn([batch] + shape, device=dev)
        x1 = torch.randn([1] + shape, device=dev)
    y = torch.randint(0, classes, [batch] + (shape if lm else []), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    fwd = torch.compile(model) if use_compile else model

    def step():
        opt.zero_grad()
        out = fwd(x)
        loss = loss_fn(out.reshape(-1, classes), y.reshape(-1)) if lm else loss_fn(out, y)
        loss.backward()
        opt.step()

    result = {
        "framework": "pytorch", "version": torch.__version__, "model": model_name,
        "batch_size": batch, "threads": torch.get_num_threads(), "blas_threads": blas.threads(),
        "device": device, "compile": use_compile, "precision": precision,
        "blas": os.environ.get("LD_LIBRARY_PATH", "default"),
    }
    if use_compile:
        # Compiling happens in the first calls: do it before the timing rule sees a first step.
        t = time.perf_counter()
        step()
        sync()
        result["compile_seconds"] = time.perf_counter() - t
    seconds = float(req.get("seconds", 0))
    try:
        if seconds > 0:
            times, info = adaptive_times(step, sync, seconds, int(req.get("min_rounds", 3)),
                                         float(req.get("warmup_seconds", 0.25)),
                                         float(req.get("max_step_seconds", 0)))
        else:
            times, info = fixed_times(step, sync, int(req.get("warmup", 20)),
                                      int(req.get("steps", 50)), int(req.get("repeats", 7)))
    except Skip as s:
        result.update({"skipped": True, "reason": s.reason, "first_step_ms": 1e3 * s.first})
        return result
    times.sort()
    result.update(info)
    result.update({"median_ms": 1e3 * times[len(times) // 2], "min_ms": 1e3 * times[0],
                   "max_ms": 1e3 * times[-1]})
    if dev.type == "cuda":
        result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
    elif rss_base is not None:
        hwm = _status_bytes("VmHWM")
        if hwm is not None:
            result["peak_memory_bytes"] = max(0, hwm - rss_base)
    if req.get("latency", False):
        model.eval()
        with torch.no_grad():
            lat = latency_times(lambda: fwd(x1), sync, float(req.get("latency_seconds", 0.3)))
        model.train()
        lat.sort()
        result["latency_ms"] = 1e3 * lat[len(lat) // 2]
        result["latency_min_ms"] = 1e3 * lat[0]
        result["latency_calls"] = len(lat)
    return result


def serve(blas):
    print(json.dumps(hello(blas)), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            out = run(req, blas)
        except Exception as e:  # reported to the caller, which skips the row and says why
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0,
                    help="adaptive timing: about this many seconds of timed steps")
    ap.add_argument("--min-rounds", type=int, default=3)
    ap.add_argument("--warmup-seconds", type=float, default=0.25)
    ap.add_argument("--max-step-seconds", type=float, default=0)
    ap.add_argument("--latency", action="store_true",
                    help="also time batch-1 inference (forward, eval mode, no grad)")
    ap.add_argument("--latency-seconds", type=float, default=0.3)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--serve", action="store_true",
                    help="worker mode: JSON requests on stdin, one JSON answer per line")
    args = ap.parse_args()
    blas = Blas()
    if args.serve:
        serve(blas)
        return
    if not args.model:
        ap.error("--model is required (or --serve)")
    req = {k: v for k, v in vars(args).items() if k != "serve"}
    print(json.dumps(run(req, blas)))


if __name__ == "__main__":
    main()
