# PyTorch side of bench/conv_bench.cpp: the same shapes, the same timing rule (median of 7
# rounds), the same GFLOP/s convention. Run with the same thread count, e.g.
#   OMP_NUM_THREADS=2 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \
#       python3 bench/conv_torch.py [batch] [shape name]
import statistics
import sys
import time

import torch

torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "2")))
n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
name_filter = sys.argv[2] if len(sys.argv) > 2 else ""
# (name, C, H, W, O, k, stride, padding, input needs a gradient)
shapes = [
    ("lenet_c1", 1, 28, 28, 6, 5, 1, 2, False), ("lenet_c2", 6, 14, 14, 16, 5, 1, 0, True),
    ("mnist_c1", 1, 28, 28, 32, 3, 1, 0, False), ("mnist_c2", 32, 26, 26, 64, 3, 1, 0, True),
    ("fmnist_c1", 1, 28, 28, 32, 3, 1, 1, False), ("fmnist_c2", 32, 14, 14, 64, 3, 1, 1, True),
    ("res_16", 16, 32, 32, 16, 3, 1, 1, True), ("res_32", 32, 16, 16, 32, 3, 1, 1, True),
    ("res_64", 64, 8, 8, 64, 3, 1, 1, True), ("res_s2", 16, 32, 32, 32, 3, 2, 1, True),
    ("res_1x1s2", 16, 32, 32, 32, 1, 2, 0, True),
]
F = torch.nn.functional
for name, c, h, w, o, k, s, p, xg in shapes:
    if name_filter and name_filter != name:
        continue
    x = torch.randn(n, c, h, w, requires_grad=xg)
    wt = torch.randn(o, c, k, k, requires_grad=True)
    b = torch.randn(o, requires_grad=True)
    gy = torch.randn_like(F.conv2d(x, wt, b, s, p))
    fl = 2.0 * n * o * gy.shape[2] * gy.shape[3] * c * k * k
    total = fl * (3 if xg else 2)

    def fwd():
        with torch.no_grad():
            F.conv2d(x, wt, b, s, p)

    def step():
        F.conv2d(x, wt, b, s, p).backward(gy)
        x.grad = None
        wt.grad = None
        b.grad = None

    for _ in range(3):
        step()
    reps = max(3, int(1e9 / total))
    tf, tt = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            fwd()
        t1 = time.perf_counter()
        for _ in range(reps):
            step()
        t2 = time.perf_counter()
        tf.append((t1 - t0) / reps)
        tt.append((t2 - t1) / reps)
    mf, mt = statistics.median(tf), statistics.median(tt)
    print(f"{name:10s} fwd {mf*1e3:7.3f} ms {fl/mf/1e9:6.1f} GF/s   "
          f"fwd+bwd {mt*1e3:7.3f} ms {total/mt/1e9:6.1f} GF/s")
