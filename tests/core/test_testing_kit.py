"""The plugin author's kit itself (singa_core.testing): its pytest fixtures are installed
(the ``pytest11`` entry point), and its checks fail for layers and updaters that break
their contracts, each with a message saying what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.dropout import DropoutLayer
from singa_builtins.layers.inner_product import InnerProductLayer
from singa_builtins.updaters.sgd import SGDUpdater

from singa_core.layer import kAggGrad
from singa_core.testing import SourceLayer, check_layer, check_updater, mlp_job

IP = 'name: "ip" innerproduct_conf { num_output: 3 } param { name: "w" } param { name: "b" }'


def x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_fixtures_come_from_the_installed_pytest_plugin(
    singa_check_layer,
    singa_check_updater,
    singa_check_worker,
    singa_run_job,
    singa_blobs,
    singa_gradient_checker,
):
    report = singa_check_layer("kInnerProduct", IP, [x(4, 5)], shape=(4, 3))
    assert report.plain.checked > 0 and report.strided.checked > 0
    assert report.aggregated_params == 2
    singa_check_updater("kSGD", "type: kSGD momentum: 0.9")
    stub = singa_check_worker(mlp_job(singa_blobs), steps=1)
    assert stub.events
    run = singa_run_job(mlp_job(singa_blobs, steps=20))
    assert run.exit_code == 0 and sorted(run.checkpoints) == [20]
    assert singa_gradient_checker.threshold == 1e-3


def test_a_wrong_shape_is_reported():
    with pytest.raises(AssertionError, match=r"output shape \(4, 3\) after setup, expected"):
        check_layer("kInnerProduct", IP, [x(4, 5)], shape=(4, 5))


def test_a_layer_that_overwrites_under_kagggrad_fails():
    class Overwrites(InnerProductLayer):
        def backward(self, phase, srcs):
            super().backward(phase & ~kAggGrad, srcs)

    with pytest.raises(AssertionError, match="must be added into p.grad"):
        check_layer(Overwrites, IP, [x(4, 5)])


def test_a_wrong_gradient_fails_on_plain_and_names_the_source():
    class Off(InnerProductLayer):
        def backward(self, phase, srcs):
            super().backward(phase, srcs)
            srcs[0].grad_for(self)[...] *= 1.01

    with pytest.raises(AssertionError, match=r"gradient checks of 'ip' failed[\s\S]*src 0"):
        check_layer(Off, IP, [x(4, 5)])


def test_a_layer_drawing_from_the_global_generator_is_not_repeatable():
    class GlobalDropout(DropoutLayer):
        def forward(self, phase, srcs):
            self.ctx.rng = np.random.default_rng()  # ignores the generator it is handed
            super().forward(phase, srcs)

    conf = 'name: "drop" dropout_conf { dropout_ratio: 0.5 }'
    check_layer(DropoutLayer, conf, [x(6, 8)])  # the real one passes
    with pytest.raises(AssertionError, match="differ"):
        check_layer(GlobalDropout, conf, [x(6, 8)], no_gradient=True)


def test_an_updater_keeping_history_outside_its_state_fails():
    class HiddenMomentum(SGDUpdater):
        """Momentum kept in an attribute: lost by a checkpoint."""

        def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
            g = self.prologue(value, grad, scale, wd_scale)
            h = self.__dict__.setdefault("h", np.zeros_like(value))
            h *= 0.9
            h -= self.lr(step) * lr_scale * g
            value += h

    with pytest.raises(AssertionError, match="restored updater diverges"):
        check_updater(HiddenMomentum, "type: kSGD")


def test_check_layer_on_a_loss_layer_and_a_convolution():
    labels = np.array([0, 1, 2, 3, 1])
    loss = check_layer(
        "kSoftmaxLoss", 'name: "loss"', [x(5, 4), SourceLayer(labels=labels, grad=False)]
    )
    assert loss.plain.checked == loss.strided.checked == 20
    conv = (
        'name: "c" convolution_conf { num_filters: 3 kernel: 3 pad: 1 } '
        'param { name: "w" } param { name: "b" }'
    )
    report = check_layer("kConvolution", conv, [x(2, 2, 5, 5)], shape=(2, 3, 5, 5))
    assert report.strided.checked > 0 and report.aggregated_params == 2
