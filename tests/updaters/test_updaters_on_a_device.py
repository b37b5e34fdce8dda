"""Every built-in updater on the stand-in device (singa_core/contracts/standin.py): the server
side of the in-process engine keeps a GPU worker's Params, gradients and updater history on
the GPU, so an updater may not allocate numpy arrays or mix them in. The stand-in refuses
both as CuPy does, and its results must equal the CPU's."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from singa_core.device import standin_device, to_host
from singa_core.plugin_host.host import get_host
from singa_core.schema import job_pb2

CONFS = {
    "kSGD": "momentum: 0.9 weight_decay: 0.01 clip_low: -1 clip_high: 1",
    "kNesterov": "momentum: 0.9 weight_decay: 0.01",
    "kAdaGrad": "weight_decay: 0.01 delta: 1e-6",
    "kRMSProp": "rmsprop_conf { rho: 0.9 } delta: 1e-6",
    "kAdaDelta": "adadelta_conf { rho: 0.95 } delta: 1e-6",
    "kAdam": "adam_conf { beta1: 0.9 beta2: 0.999 } weight_decay: 0.01",
    "kAdamMax": "adammax_conf { beta1: 0.9 beta2: 0.999 }",
}


def _builtin_updaters():
    reg = get_host().registries["updater"]
    return sorted(
        n for n, e in reg.entries.items() if e.provider.dist == "singa-classic" and not e.alias_of
    )


def test_every_builtin_updater_is_covered():
    assert set(_builtin_updaters()) <= set(CONFS)


@pytest.mark.parametrize("name", sorted(CONFS))
def test_updater_on_a_device_equals_the_cpu(name):
    host = get_host()
    conf = text_format.Parse(CONFS[name], job_pb2.UpdaterProto())
    conf.learning_rate.base_lr = 0.05
    lr = host.get("lr_change", "kFixed")(conf.learning_rate)
    device = standin_device()
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((5, 7)).astype(np.float32)
    grads = [rng.standard_normal((5, 7)).astype(np.float32) for _ in range(4)]
    results = []
    for dev in (None, device):
        upd = host.get("updater", name)(conf, lr)
        w = w0.copy() if dev is None else dev.asarray(w0)
        state = upd.init_state(w)
        for step, g in enumerate(grads):
            gb = g.copy() if dev is None else dev.asarray(g)
            upd.apply(step, w, gb, state, scale=0.5, lr_scale=2.0, wd_scale=1.0)
        if dev is not None:
            assert type(w) is device.xp.ndarray
            assert all(type(a) is device.xp.ndarray for a in state.values())
        results.append(to_host(w))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
    assert not np.array_equal(results[0], w0)
