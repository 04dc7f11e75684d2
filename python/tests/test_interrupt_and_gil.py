"""Ctrl-C stops freight.train cleanly (the step under way finishes, a checkpoint that resumes is
saved, the call returns), and the GIL is released while the engine works."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import freight

SCRIPT = textwrap.dedent("""
    import sys, freight
    r = freight.train(model="mlp", data="synthetic", epochs=50, batch_size=16,
                      limit_train=4096, limit_test=64, save=sys.argv[1])
    print("RESULT", r.interrupted, r.checkpoint, flush=True)
""")


def test_ctrl_c_stops_training_and_saves_a_checkpoint_that_resumes(tmp_path):
    ckpt = str(tmp_path / "run.safetensors")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, ckpt], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    output = []
    # The first progress line: training is under way (on a GPU the bar is updated a few times
    # a second, so that line may come at an epoch's end).
    for line in p.stdout:
        output.append(line)
        if line.startswith("epoch 1"):
            break
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=120)
    text = "".join(output) + rest
    assert p.returncode == 0, text
    assert re.search(r"stopped by Ctrl-C in epoch [12] after batch \d+", text), text
    assert "RESULT True " + ckpt in text, text
    # The checkpoint resumes where the run stopped.
    r = freight.train(resume=ckpt, data="synthetic", epochs=2, batch_size=16, limit_train=4096,
                      limit_test=64, progress=False)
    assert r.epochs and r.epochs[-1]["epoch"] == 2


def test_the_gil_is_released_while_the_engine_runs():
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks[0]
        start = time.monotonic()
        freight.explain(model="mlp", warmup=1, min_steps=2, min_seconds=0.5)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join()
    # Holding the GIL for the whole call would leave the counter where it was.
    assert ticks[0] - before > 0.2 * elapsed / 0.001 * 0.1, (ticks[0] - before, elapsed)
