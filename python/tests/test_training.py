"""Training from Python: a loop written with freight.nn, freight.optim and freight.data reaches
the weights `freight.train` reaches with the same seed, bit for bit; train/evaluate/explain/plan
return Python objects; checkpoints go between Python, the command and PyTorch."""
import io
import json
import os
import subprocess

import numpy as np
import pytest

import freight

TRAIN = dict(model="mlp", data="synthetic", seed=7, epochs=2, limit_train=512, limit_test=64,
             batch_size=64, optimizer="sgd", lr=0.05, momentum=0.9, schedule="none",
             device="cpu")


def python_loop(fused_backward=False, **changes):
    TRAIN_ = dict(TRAIN, **changes)
    freight.manual_seed(TRAIN_["seed"])
    model = freight.nn.build(TRAIN_["model"])
    opt = freight.optim.SGD(model.parameters(), lr=TRAIN_["lr"], momentum=TRAIN_["momentum"])
    opt.fused_backward = fused_backward
    ds = freight.data.load(TRAIN_["data"], "train", model.spec).slice(0, TRAIN_["limit_train"])
    mean, std = freight.data.normalisation(TRAIN["data"])
    loader = freight.data.Loader(ds, batch_size=TRAIN_["batch_size"], seed=TRAIN_["seed"],
                                 mean=mean, std=std)
    model.train()
    for epoch in range(TRAIN_["epochs"]):
        for x, y in loader.epoch(epoch):
            opt.zero_grad()
            loss = freight.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    return model


def test_a_python_loop_reaches_the_weights_of_train():
    mine = python_loop().state_dict()
    theirs = freight.train(progress=False, **TRAIN).model.state_dict()
    assert list(mine) == list(theirs)
    for name in mine:
        assert np.array_equal(np.asarray(mine[name]), np.asarray(theirs[name])), name


def test_fused_backward_reaches_the_weights_of_train_for_large_layers():
    # fcn5's large weights at batch 64: freight.train updates them inside backward; a loop that
    # asks for the same gets the same bits, and one that does not stays within rounding.
    changes = dict(model="fcn5", epochs=1, limit_train=128)
    theirs = freight.train(progress=False, **dict(TRAIN, **changes)).model.state_dict()
    fused = python_loop(fused_backward=True, **changes).state_dict()
    plain = python_loop(**changes).state_dict()
    assert list(fused) == list(theirs)
    for name in theirs:
        a, b, c = (np.asarray(d[name]) for d in (fused, theirs, plain))
        assert np.array_equal(a, b), name
        assert np.allclose(c, b, rtol=1e-4, atol=1e-6), name


def test_fused_backward_leaves_the_large_weights_without_grad():
    freight.manual_seed(1)
    model = freight.nn.build("fcn5")
    opt = freight.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    assert not opt.fused_backward
    opt.fused_backward = True
    x, y = freight.randn([64, 1, 28, 28]), freight.randint(0, 10, [64])
    opt.zero_grad()
    freight.cross_entropy(model(x), y).backward()
    no_grad = [tuple(p.shape) for p in model.parameters() if p.grad is None]
    assert no_grad == [(2048, 784), (4096, 2048), (1024, 4096)]
    opt.step()


def test_train_returns_epochs_and_prints_lines_off_a_terminal(tmp_path):
    out = io.StringIO()  # not a terminal: lines, no carriage returns
    seen = []
    r = freight.train(stream=out, on_epoch=seen.append, metrics=str(tmp_path / "m.jsonl"), **TRAIN)
    assert len(r.epochs) == 2 and seen == r.epochs
    assert set(r.epochs[0]) >= {"epoch", "train_loss", "test_accuracy", "samples_per_second"}
    text = out.getvalue()
    assert "\r" not in text and "epoch 2: train loss" in text
    lines = [json.loads(l) for l in open(tmp_path / "m.jsonl")]
    assert [l["epoch"] for l in lines] == [1, 2]
    assert r.model.spec.name == "mlp"


def test_bad_options_raise_python_errors():
    with pytest.raises(TypeError, match="unknown option 'epoch'"):
        freight.train(model="mlp", epoch=1)
    # A value of the wrong kind names the option, the value and what it takes.
    with pytest.raises(TypeError, match=r"batch_size='x' \(str\) must be an int"):
        freight.train(progress=False, **dict(TRAIN, batch_size="x"))
    with pytest.raises(TypeError, match=r"seed=-1 \(int\) must be a non-negative int"):
        freight.train(progress=False, **dict(TRAIN, seed=-1))
    with pytest.raises(TypeError, match=r"lr='fast' \(str\) must be a number"):
        freight.train(progress=False, **dict(TRAIN, lr="fast"))
    with pytest.raises(freight.Error, match="--optimizer: 'sgdd' is not one of"):
        freight.train(progress=False, **dict(TRAIN, optimizer="sgdd"))
    with pytest.raises(freight.Error, match="no-such-model"):
        freight.nn.build("no-such-model")
    with pytest.raises(TypeError):
        freight.train(model=freight.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"model=5 \(int\) must be a zoo model name"):
        freight.train(progress=False, **dict(TRAIN, model=5))


def test_a_callback_error_stops_the_run_and_is_raised():
    def boom(progress):
        raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        freight.train(progress=False, on_batch=boom, **TRAIN)


def test_models_from_dicts_and_layers():
    spec = {"name": "tiny", "input": {"shape": [4]}, "classes": 3,
            "layers": [{"type": "linear", "out": 8}, {"type": "relu"},
                       {"type": "linear", "out": 3}]}
    m = freight.nn.build(spec)
    assert m(freight.randn((5, 4))).shape == (5, 3)
    seq = freight.nn.Sequential(freight.nn.Linear(4, 8), freight.nn.ReLU(), freight.nn.Linear(8, 3))
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    seq.load_state_dict(m.state_dict())
    x = freight.randn((2, 4))
    assert np.array_equal(seq(x).numpy(), m(x).numpy())
    with pytest.raises(freight.Error, match="2.weight"):
        seq.load_state_dict({k: v for k, v in m.state_dict().items() if k != "2.weight"})


def test_no_grad_records_nothing():
    x = freight.randn((3,), requires_grad=True)
    with freight.no_grad():
        y = x * 2.0
    assert not y.requires_grad
    assert (x * 2.0).requires_grad


def test_checkpoints_go_to_the_command_and_to_pytorch(tmp_path, freight_command):
    r = freight.train(progress=False, **TRAIN)
    path = tmp_path / "py.safetensors"
    freight.save(r.model, path)
    run = subprocess.run([freight_command, "eval", "--checkpoint", str(path), "--data",
                          "synthetic", "--limit", "256"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "256 samples" in run.stdout
    back = freight.load(path)
    assert back.metadata["model"] == "mlp"
    ours = freight.evaluate(back, data="synthetic", limit=256)
    assert ours["samples"] == 256
    # A misspelt split or a limit that is no count is refused, not read as "test" or "all".
    for bad in ({"split": "valid"}, {"split": "val"}):
        with pytest.raises(ValueError, match="split must be 'test' or 'train'"):
            freight.evaluate(path, data="synthetic", **bad)
    for bad in ({"limit": 0}, {"limit": -1}, {"batch_size": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            freight.evaluate(back, data="synthetic", **bad)
    with pytest.raises(TypeError, match="limit must be an int"):
        freight.evaluate(path, data="synthetic", limit=2.5)
    torch = pytest.importorskip("torch")
    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    state = r.model.state_dict()
    if load_file is not None:
        loaded = load_file(str(path))
        for name in state:
            assert np.array_equal(loaded[name].numpy(), np.asarray(state[name]))
    # PyTorch's twin of the model (the same layers) loads it strictly.
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    net.load_state_dict({k: torch.from_numpy(np.asarray(v).copy()) for k, v in state.items()})
    x = np.random.default_rng(1).standard_normal((3, 1, 28, 28)).astype(np.float32)
    theirs = net(torch.from_numpy(x)).detach().numpy()
    assert np.allclose(r.model(freight.from_numpy(x)).numpy(), theirs, rtol=1e-4, atol=1e-5)


def test_explain_and_plan_return_rows():
    e = freight.explain(model="mlp", min_seconds=0.1, warmup=1, min_steps=2)
    assert e["step_seconds"] > 0
    layers = [row for row in e["rows"] if row["kind"] == "layer"]
    assert any(row["describe"].startswith("Linear(784, 512)") for row in layers)
    d = freight.explain(model="mlp", data="synthetic", min_seconds=0.1, warmup=1, min_steps=2)
    assert d["data"]["samples"] > 0 and d["data"]["batch_seconds"] > 0
    assert "data" not in e
    p = freight.plan(model="mlp", samples=1000)
    assert p["devices"][0]["label"] == "cpu" and p["recommendation"]
    with pytest.raises(TypeError, match="unknown option"):
        freight.plan(modle="mlp")


def test_optimizers_and_schedules():
    w = freight.tensor([1.0, -1.0], requires_grad=True)
    opt = freight.optim.AdamW([w], lr=0.1)
    sched = freight.optim.StepLR(opt, step_size=1, gamma=0.5)
    (w * w).sum().backward()
    opt.step()
    sched.step()
    assert abs(opt.lr - 0.05) < 1e-12
    assert abs(w.tolist()[0]) < 1.0  # moved toward 0
    assert set(opt.state_dict()) >= {"state.0.exp_avg", "state.0.exp_avg_sq"}


def test_bench_returns_its_json_report(freight_command, monkeypatch):
    monkeypatch.setenv("FREIGHT_EXECUTABLE", freight_command)
    r = freight.bench(models=["mlp"], batch_sizes=[8], threads=[1], devices="cpu", seconds=0.05)
    rows = [row for row in r["rows"] if row["model"] == "mlp"]
    assert rows and rows[0]["batch_size"] == 8 and rows[0]["median_ms"] > 0
    with pytest.raises(freight.Error, match="freight bench failed"):
        freight.bench(models=["no-such-model"], devices="cpu")
