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
