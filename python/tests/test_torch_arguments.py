"""Arguments written for PyTorch either mean what they mean there or are refused with a message
that says what Freight does instead."""
import pytest

import freight


def test_conv2d_padding_same_and_valid():
    x = freight.randn((2, 3, 9, 7))
    same = freight.nn.Conv2d(3, 4, 5, padding="same")
    assert same(x).shape == (2, 4, 9, 7)
    dilated = freight.nn.Conv2d(3, 4, 3, padding="same", dilation=2)
    assert dilated(x).shape == (2, 4, 9, 7)
    assert freight.nn.Conv2d(3, 4, (3, 5), padding="valid")(x).shape == (2, 4, 7, 3)
    with pytest.raises(Exception, match="stride 1"):
        freight.nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(Exception, match="uneven padding"):
        freight.nn.Conv2d(3, 4, 4, padding="same")
    with pytest.raises(Exception, match="'full'"):
        freight.nn.Conv2d(3, 4, 3, padding="full")
    with pytest.raises(Exception, match="one integer or two"):
        freight.nn.Conv2d(3, 4, "three")


def test_onecycle_cycles_the_learning_rate_only_and_says_so():
    model = freight.nn.Linear(4, 2)
    opt = freight.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = freight.optim.OneCycleLR(opt, max_lr=0.1, total_steps=10, cycle_momentum=False)
    assert sched.get_last_lr()[0] == pytest.approx(0.1 / 25)
    with pytest.raises(Exception, match="cycle_momentum"):
        freight.optim.OneCycleLR(opt, max_lr=0.1, total_steps=10, cycle_momentum=True)


def test_cross_entropy_takes_torch_arguments():
    # Values and gradients against torch.nn.functional.cross_entropy, float64.
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5))
    y = np.array([0, 3, -100, 4, 1, 3])
    w = rng.random(5) + 0.5
    cases = [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.1},
             {"weight": w}, {"weight": w, "label_smoothing": 0.2},
             {"ignore_index": 3, "reduction": "none"},
             {"weight": w, "reduction": "sum", "label_smoothing": 0.3}]
    for kw in cases:
        labels = y if "ignore_index" not in kw else np.array([0, 3, 2, 4, 1, 3])
        tx = torch.tensor(x, requires_grad=True)
        tkw = {k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()}
        theirs = torch.nn.functional.cross_entropy(tx, torch.tensor(labels), **tkw)
        theirs.sum().backward()
        fx = freight.from_numpy(x.copy())
        fx.requires_grad = True
        fkw = {k: freight.from_numpy(v.copy()) if k == "weight" else v for k, v in kw.items()}
        ours = freight.cross_entropy(fx, freight.from_numpy(labels.copy()), **fkw)
        freight.sum(ours).backward()
        assert np.allclose(np.asarray(ours.tolist()), theirs.detach().numpy(), rtol=1e-12,
                           atol=1e-12), kw
        assert np.allclose(np.asarray(fx.grad.tolist()), tx.grad.numpy(), rtol=1e-12,
                           atol=1e-12), kw


def test_cross_entropy_arguments_are_checked():
    x = freight.randn((3, 4))
    y = freight.tensor([0, 1, 2], dtype="int64")
    assert freight.cross_entropy(x, y, reduction="none").shape == (3,)
    with pytest.raises(Exception, match="reduction 'avg'"):
        freight.cross_entropy(x, y, reduction="avg")
    with pytest.raises(Exception, match="label_smoothing"):
        freight.cross_entropy(x, y, label_smoothing=1.5)
    with pytest.raises(Exception, match="weight must be"):
        freight.cross_entropy(x, y, weight=[1.0, 2.0])
    with pytest.raises(Exception, match="label 7"):
        freight.cross_entropy(x, freight.tensor([0, 7, 2], dtype="int64"), reduction="sum")
