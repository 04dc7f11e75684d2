"""DLPack with PyTorch (and NumPy): freight.from_dlpack and torch.from_dlpack share memory; a
write through one side is read through the other, on the CPU and, where a GPU answers, on it."""
import numpy as np
import pytest

import freight

torch = pytest.importorskip("torch")


def _torch_from_dlpack(x):
    # torch.from_dlpack appeared in 1.10; torch.utils.dlpack.from_dlpack takes the same objects.
    return torch.utils.dlpack.from_dlpack(x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_freight_to_torch_shares_memory(dtype):
    t = freight.zeros((3, 4), dtype=dtype)
    x = _torch_from_dlpack(t)
    assert tuple(x.shape) == (3, 4)
    assert str(x.dtype) == "torch." + dtype
    x[1, 2] = 7
    assert t.tolist()[1][2] == 7
    t.fill_(2)
    assert bool((x == 2).all())
    assert x.data_ptr() == t.data_ptr()


def test_torch_to_freight_shares_memory():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = freight.from_dlpack(x)
    assert t.shape == (3, 4) and t.dtype == "float32"
    assert t.data_ptr() == x.data_ptr()
    x[0, 0] = -5
    assert t.tolist()[0][0] == -5
    t.fill_(1)
    assert float(x.sum()) == 12.0


def test_legacy_capsules_and_strided_views():
    x = torch.arange(20, dtype=torch.float64).reshape(4, 5)[:, 1:4]
    t = freight.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert t.shape == (4, 3)
    assert t.tolist() == x.tolist()
    capsule = torch.utils.dlpack.to_dlpack(torch.ones(2))
    freight.from_dlpack(capsule)
    with pytest.raises(freight.Error, match="consumed once"):
        freight.from_dlpack(capsule)


def test_bfloat16_goes_both_ways():
    x = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    t = freight.from_dlpack(x)  # (bfloat16 arithmetic is the GPU's: on the CPU it is held)
    assert t.dtype == "bfloat16" and t.data_ptr() == x.data_ptr()
    back = _torch_from_dlpack(t)
    assert back.dtype == torch.bfloat16 and back.tolist() == [1.5, -2.0, 3.0]


def test_the_producer_outlives_its_python_references():
    x = torch.full((1000,), 2.0)
    t = freight.from_dlpack(x)
    del x
    assert t.sum().item() == 2000.0


def test_numpy_from_dlpack_shares_memory():
    if not hasattr(np, "from_dlpack"):
        pytest.skip("NumPy without from_dlpack")
    t = freight.ones((4,), dtype="float64")
    n = np.from_dlpack(t)  # NumPy 1.x marks DLPack imports read-only
    t.fill_(9)
    assert n.tolist() == [9, 9, 9, 9]


@pytest.mark.skipif(not freight.cuda_is_available(), reason="no GPU answers here")
def test_cuda_both_ways_share_memory():
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    t = freight.from_dlpack(x)
    assert t.device == "cuda:0" and t.data_ptr() == x.data_ptr()
    (t * 2.0)  # Freight work on its own stream, ordered after PyTorch's writes
    t.fill_(3)
    back = _torch_from_dlpack(t)
    assert back.device.type == "cuda" and back.data_ptr() == x.data_ptr()
    assert float(back.sum()) == 24.0
    y = torch.randn(64, 64, device="cuda")
    ty = freight.from_dlpack(y)
    assert np.allclose(ty.to("cpu").numpy(), y.cpu().numpy())
