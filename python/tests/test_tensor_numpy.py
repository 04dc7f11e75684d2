"""freight.Tensor and NumPy: memory is shared both ways (a write through one is read through the
other), dtypes map exactly, and what cannot be shared says why."""
import numpy as np
import pytest

import freight


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_from_numpy_shares_memory(dtype):
    a = (np.arange(12) % 7).astype(dtype).reshape(3, 4)
    t = freight.from_numpy(a)
    assert t.shape == (3, 4)
    assert t.dtype == np.dtype(dtype).name
    assert t.device == "cpu"
    a[1, 2] = 5
    assert t.tolist()[1][2] == 5
    # Written through Freight (an in-place op on the tensor), read through NumPy.
    t.fill_(3)
    assert (a == 3).all()


def test_numpy_of_a_tensor_shares_memory():
    t = freight.zeros((2, 5))
    n = t.numpy()
    n[0, 4] = 2.5
    assert t.tolist()[0][4] == 2.5
    t.fill_(1.5)
    assert (n == 1.5).all()
    assert np.shares_memory(n, np.asarray(t))


def test_strided_views_are_shared_without_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = freight.from_numpy(a[:, 1::2])  # a non-contiguous view
    assert t.shape == (4, 3)
    assert not t.is_contiguous()
    assert t.tolist() == a[:, 1::2].tolist()
    a[3, 5] = -1
    assert t.tolist()[3][2] == -1
    # A transposed Freight view exported back to NumPy keeps its strides.
    tt = freight.from_numpy(a).T
    assert np.array_equal(tt.numpy(), a.T)


def test_the_array_outlives_python_references():
    a = np.arange(1000, dtype=np.float64)
    t = freight.from_numpy(a)
    del a  # the tensor holds the array
    assert t.sum().item() == sum(range(1000))


def test_values_survive_ops_and_autograd():
    x = freight.from_numpy(np.array([[1.0, -2.0, 3.0]], dtype=np.float32)).clone()
    x.requires_grad = True
    y = (freight.relu(x) * 2.0).sum()
    y.backward()
    assert x.grad.tolist() == [[2.0, 0.0, 2.0]]
    assert y.item() == 8.0


def test_unsupported_arrays_say_why():
    with pytest.raises(freight.Error, match="no Freight dtype"):
        freight.from_numpy(np.zeros(3, dtype=np.int16))
    with pytest.raises(freight.Error, match="negative strides"):
        freight.from_numpy(np.arange(4, dtype=np.float32)[::-1])
    with pytest.raises(freight.Error, match="big-endian"):
        freight.from_numpy(np.zeros(3, dtype=">f4"))
    torch = pytest.importorskip("torch")
    bf16 = freight.from_dlpack(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(freight.Error, match="bfloat16 tensor has no NumPy dtype"):
        bf16.numpy()


def test_read_only_arrays_are_copied_not_shared():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    t = freight.from_numpy(a)
    t.fill_(9)  # would write into a read-only array if it were shared
    assert a.tolist() == [0, 1, 2, 3]


def test_tensor_copies_lists_and_numbers():
    t = freight.tensor([[1, 2], [3, 4]])
    assert t.dtype == "int64" and t.shape == (2, 2)
    f = freight.tensor([0.5, 1.5], dtype="float64")
    assert f.dtype == "float64" and f.tolist() == [0.5, 1.5]
    a = np.ones(3, dtype=np.float32)
    c = freight.tensor(a)
    a[0] = 7
    assert c.tolist() == [1, 1, 1]  # freight.tensor always copies
    with pytest.raises(freight.Error, match="rows of different lengths"):
        freight.tensor([[1, 2], [3]])


def test_tensor_keeps_int64_exact_and_refuses_what_does_not_fit():
    big = [2**63 - 1, -(2**63), 2**53 + 1]
    assert freight.tensor(big).tolist() == big  # beyond a double's 53 bits, still exact
    for too_big in ([2**63], [-(2**63) - 1], 2**70, [[1, 2], [3, 2**64 + 5]]):
        with pytest.raises(ValueError, match="does not fit in int64"):
            freight.tensor(too_big)
    # Beside a float the list makes a float tensor, where 2^70 fits.
    assert freight.tensor([2**70, 0.5]).tolist() == [float(2**70), 0.5]


def test_shapes_indices_and_targets_that_make_no_sense_say_so():
    with pytest.raises(ValueError, match=r"sizes >= 0, got -1 in \(-1, 3\)"):
        freight.randn((-1, 3))
    with pytest.raises(TypeError, match="a shape is an int or a sequence of ints, got 'ab'"):
        freight.randn("ab")
    with pytest.raises(TypeError, match="a shape holds ints, got 2.5"):
        freight.zeros((2.5, 3))
    assert freight.zeros((np.int64(2), 3)).shape == (2, 3)  # NumPy's integers are sizes
    with pytest.raises(IndexError, match="too many indices"):
        freight.randn((3, 4))[0, 0, 0]
    with pytest.raises(freight.Error, match=r"Tensor.to\('tpu'\): neither a device .* nor a dtype"):
        freight.randn((3,)).to("tpu")


def test_indexing_and_shape_ops():
    t = freight.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    assert t[1].shape == (3, 4)
    assert t[1, 2].tolist() == [20, 21, 22, 23]
    assert t[:, 1:3].shape == (2, 2, 4)
    assert t.reshape(6, 4).shape == (6, 4)
    assert t.permute(2, 0, 1).shape == (4, 2, 3)
    with pytest.raises(IndexError):
        t[2]


def test_lifetimes_follow_the_memory():
    import gc
    import weakref
    a = np.arange(8, dtype=np.float32)
    alive = weakref.ref(a)
    t = freight.from_numpy(a)
    del a
    gc.collect()
    assert alive() is not None  # the tensor holds the array
    del t
    gc.collect()
    assert alive() is None  # and lets it go with the last view
    # A refused array is not kept either.
    b = np.arange(4, dtype=np.float32)[::-1]
    gone = weakref.ref(b)
    with pytest.raises(freight.Error):
        freight.from_numpy(b)
    del b
    gc.collect()
    assert gone() is None


def test_an_array_of_a_parameter_survives_the_module_moving():
    m = freight.nn.Linear(3, 2)
    w = m.state_dict()["weight"].numpy()
    before = w.copy()
    m.to("float64")  # the parameter gets new memory; the array keeps the old
    assert m.state_dict()["weight"].dtype == "float64"
    assert np.array_equal(w, before)
    w[0, 0] = 5  # still writable memory of its own


def test_numpy_refusals_raise_instead_of_reading_elements():
    torch = pytest.importorskip("torch")
    bf16 = freight.from_dlpack(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(freight.Error, match="no NumPy dtype"):
        np.asarray(bf16)
    with pytest.raises(freight.Error, match="no NumPy dtype"):
        bf16.tolist()


def test_arithmetic_with_numbers_on_integer_tensors_computes_in_float32():
    i = freight.tensor([3, 4])
    assert (i / 2).tolist() == [1.5, 2.0] and (i / 2).dtype == "float32"
    assert (i * 0.5).tolist() == [1.5, 2.0]
    assert (i + 1).tolist() == [4.0, 5.0]
    assert (1.5 - i).tolist() == [-1.5, -2.5]


def test_deep_nesting_is_an_error_not_a_crash():
    deep = 1.0
    for _ in range(200):
        deep = [deep]
    with pytest.raises(freight.Error, match="nested more than 64 deep"):
        freight.tensor(deep)


def test_enable_grad_as_a_decorator_records():
    @freight.enable_grad()
    def double(x):
        return x * 2.0

    x = freight.ones((2,), requires_grad=True)
    with freight.no_grad():
        y = double(x)
    assert y.requires_grad


def test_argmax_takes_torch_arguments():
    # torch.argmax: no dim is the index into the flattened tensor; keepdim keeps a size-1 dim.
    t = freight.tensor([[5.0, 4.0, 3.0], [2.0, 1.0, 9.0]])
    assert t.argmax().tolist() == 5
    assert t.argmax().shape == ()
    assert freight.argmax(t).tolist() == 5
    assert t.argmax(keepdim=True).shape == (1, 1)
    assert t.argmax(1).tolist() == [0, 2]
    assert t.argmax(dim=0).tolist() == [0, 0, 1]
    assert freight.argmax(t, 1, keepdim=True).tolist() == [[0], [2]]
    assert t.argmax(-1, True).shape == (2, 1)
