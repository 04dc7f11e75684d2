"""Times PyTorch's CPU LSTM (forward + backward of one layer, batch_first) for comparison with
Freight's lstm_layer (bench/lstm/lstm_layer_bench.cpp). Prints one JSON line per shape.

  OMP_NUM_THREADS=2 /usr/bin/python3 bench/lstm/torch_lstm.py --threads 2
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp ... (to try the OpenMP OpenBLAS)
"""
import argparse
import json
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=30)
p.add_argument("--shapes", default="64,28,28,128;256,28,28,128;64,32,256,256")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)

for spec in a.shapes.split(";"):
    B, T, I, H = map(int, spec.split(","))
    lstm = torch.nn.LSTM(I, H, batch_first=True)
    x = torch.randn(B, T, I, requires_grad=True)
    g = torch.randn(B, T, H)

    def step():
        out, (hn, cn) = lstm(x)
        out.backward(g)

    x_data = x.detach()  # an input that needs no gradient (the first layer of a model)

    def step_x_nograd():
        out, (hn, cn) = lstm(x_data)
        out.backward(g)

    def fwd():
        with torch.no_grad():
            lstm(x)

    res = {}
    for name, fn in (("fwd_bwd", step), ("fwd_bwd_x_nograd", step_x_nograd), ("fwd_nograd", fwd)):
        for _ in range(3):
            fn()
        ts, cpu = [], []
        for _ in range(a.reps):
            c0 = time.process_time()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        res[name + "_ms"] = round(statistics.median(ts) * 1e3, 3)
        res[name + "_cpu_ms"] = round(statistics.median(cpu) * 1e3, 3)
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "threads": a.threads,
                      "B": B, "T": T, "I": I, "H": H, **res}), flush=True)
