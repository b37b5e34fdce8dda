"""Plain SGD's update folded into each weight gradient's GEMM (the in-process engine's
``fold`` option, on by default; ``Param.set_grad_product``, ``FoldedUpdate``).

A folded step is the unfolded step up to float32 rounding (the source gradients are taken
with the weights before the update), versions advance alike, and nothing is folded where
the rule needs the gradient (momentum) or a step looks at the gradients."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.jobconf.parse import load_job
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.running.reporting import Reporter
from singa_core.stub import ParamStub
from singa_core.testing import blobs_csv, mlp_job


def _engine(tmp_path, fold: str, updater: str):
    conf = tmp_path / "job.conf"
    if not conf.exists():
        conf.write_text(mlp_job(blobs_csv(tmp_path / "blobs.csv"), updater=updater, steps=20))
    cfg = load_job(conf, [f"cluster.workspace={tmp_path / fold}", "num_openblas_threads=1"])
    host = get_host()
    engine = host.get("engine", "inprocess")(prepare_job(cfg, host, seed=3), Reporter(quiet=True))
    engine.configure({"fold": fold})
    engine._init_params()
    return engine, engine._loop()


def _values(engine) -> dict[str, np.ndarray]:
    return {p.name: p.value.copy() for p in engine.train_net.owner_params}


def test_a_folded_step_is_the_unfolded_step(tmp_path):
    """A large rate (0.5) and weight decay, 12 steps: the Params agree to float32 rounding;
    a source gradient taken with already-updated weights would not."""
    updater = "type: kSGD weight_decay: 0.01 learning_rate { type: kFixed base_lr: 0.5 }"
    (on, on_loop), (off, off_loop) = (_engine(tmp_path, f, updater) for f in ("on", "off"))
    assert len(on_loop.stub.folds) == 4 and off_loop.stub.folds == []  # ip1, ip2: w and b
    start = _values(on)
    np.testing.assert_array_equal(start["w1"], _values(off)["w1"])
    for step in range(12):
        on_loop.step_runner(step, on_loop.stub)
        off_loop.step_runner(step, off_loop.stub)
    a, b = _values(on), _values(off)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-5, atol=2e-6, err_msg=name)
    assert not np.allclose(a["w1"], start["w1"], atol=1e-3)
    for p in on.train_net.owner_params:  # the gradients were never written, yet 12 updates
        assert p.version == off.train_net.owner_params[p.id].version == 12
        assert not p.grad.any(), p.name


def test_a_step_whose_gradients_are_looked_at_writes_them(tmp_path):
    """A stub around the engine's (the training loop's gradient histograms) sees every
    gradient: that step is not folded, and is still updated."""

    class Looking(ParamStub):
        def __init__(self, inner):
            self.inner, self.seen = inner, {}

        def collect(self, p):
            self.inner.collect(p)

        def update(self, step, p):
            self.seen[p.name] = float(np.abs(p.grad).sum())
            self.inner.update(step, p)

    updater = "type: kSGD learning_rate { type: kFixed base_lr: 0.1 }"
    engine, loop = _engine(tmp_path, "on", updater)
    before = _values(engine)
    looking = Looking(loop.stub)
    loop.step_runner(0, looking)
    assert len(looking.seen) == 4 and all(v > 0 for v in looking.seen.values()), looking.seen
    assert not np.array_equal(before["w1"], _values(engine)["w1"])
    assert all(p.version == 1 for p in engine.train_net.owner_params)


@pytest.mark.parametrize(
    "updater",
    ["type: kSGD momentum: 0.9", "type: kSGD clip_low: -1 clip_high: 1", "type: kAdaGrad"],
)
def test_rules_that_need_the_gradient_are_not_folded(tmp_path, updater):
    _, loop = _engine(tmp_path, "on", updater)
    assert loop.stub.folds == []


def test_fold_takes_on_or_off(tmp_path):
    from singa_core.errors import SingaError

    with pytest.raises(SingaError) as err:
        _engine(tmp_path, "maybe", "type: kSGD")
    assert "fold is 'maybe'" in str(err.value) and err.value.help
