"""Metrics kept on a device are read once per display for the whole net; a layer with its
own metric arithmetic (an overridden pop_metrics) is still asked itself."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.contracts import standin
from singa_core.device import standin_device, using_device
from singa_core.layer import Layer, load_metric_state, metric_state, pop_metrics_of
from singa_core.testing import layer_conf, make_ctx


class _Summing(Layer):
    placement = "device"

    def add(self, loss, acc):
        sums = self.metric_sums(("loss", "accuracy"))
        sums += self.device.asarray(np.array([loss, acc]))


class _Own(Layer):
    def pop_metrics(self):
        return {"ppl": 42.0}


@pytest.mark.parametrize("device", ["cpu", "standin"])
def test_the_net_s_device_metrics_are_read_once_per_display(device):
    from singa_core.device import open_device

    dev = open_device(device)
    with using_device(dev):
        a, b = _Summing(layer_conf('name: "a"'), make_ctx()), _Summing(layer_conf('name: "b"'),
                                                                       make_ctx())  # fmt: skip
        own = _Own(layer_conf('name: "own"'), make_ctx())
        for step in range(4):
            a.add(1.0 + step, 0.5)
            b.add(2.0, 0.25 * step)
        a.add_metric("extra", 3.0)
        with standin.counting() as c:
            got = pop_metrics_of([a, own, b])
    assert got[0] == {"loss": 2.5, "accuracy": 0.5, "extra": 3.0}
    assert got[1] == {"ppl": 42.0}
    assert got[2] == {"loss": 2.0, "accuracy": 0.375}
    if device == "standin":
        assert c.reads == 1
    assert pop_metrics_of([a, b]) == [{}, {}]  # reset, and the sums zeroed on the device
    a.add(1.0, 1.0)
    assert a.pop_metrics() == {"loss": 1.0, "accuracy": 1.0}


def test_metric_state_round_trips_and_continues_in_order():
    with using_device(standin_device()):
        a = _Summing(layer_conf('name: "a"'), make_ctx())
        a.add(1.5, 0.5)
        state = metric_state(a)
        b = _Summing(layer_conf('name: "b"'), make_ctx())
        load_metric_state(b, state)
        b.add(2.5, 1.0)
        assert b.pop_metrics() == {"loss": 2.0, "accuracy": 0.75}
