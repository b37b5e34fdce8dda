"""kDropout: inverted dropout with masks drawn by Layer.draw in training, identity otherwise."""

import numpy as np
import pytest
from singa_builtins.layers.dropout import DropoutLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTest, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)


def test_training_mask_matches_the_formula():
    assert DropoutLayer.type_names == ("kDropout",)
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((50, 40)))
    layer = build(DropoutLayer, 'name: "d" dropout_conf { dropout_ratio: 0.3 }', [src], seed=5)
    layer.forward(kTrain | kForward, [src])
    # the layer's draws: Philox4x64-10 under its key (from its generator's seed) at
    # counter (0, draw 0, the net's phase, step 0) (singa_core.contracts.draws)
    key = np.random.default_rng(5).bit_generator.seed_seq.generate_state(2, np.uint64)
    philox = np.random.Philox(key=key, counter=[0, 0, int(layer.ctx.phase), 0])
    u = np.random.Generator(philox).random(dtype=np.float32, size=(50, 40))
    mask = (u < np.float32(0.7)) / np.float32(0.7)
    np.testing.assert_allclose(layer.mask, mask, rtol=1e-6)
    np.testing.assert_allclose(layer.data, src.data * mask, rtol=1e-6)
    assert abs((layer.mask > 0).mean() - 0.7) < 0.03
    g = rng.standard_normal((50, 40))
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, g * mask, rtol=1e-6)


def test_default_ratio_and_fresh_masks_each_step():
    src = SourceLayer(np.ones((20, 30)))
    layer = build(DropoutLayer, 'name: "d"', [src])
    assert layer.ratio == pytest.approx(0.5)
    layer.forward(kTrain | kForward, [src])
    first = layer.data.copy()
    assert set(np.unique(first)) == {0.0, 2.0}
    layer.forward(kTrain | kForward, [src])
    assert not np.array_equal(first, layer.data)


def test_same_seed_same_masks():
    src = SourceLayer(np.ones((8, 9)))
    a = build(DropoutLayer, 'name: "d"', [src], seed=3)
    b = build(DropoutLayer, 'name: "d"', [src], seed=3)
    a.forward(kTrain | kForward, [src])
    b.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(a.data, b.data)


def test_masks_are_drawn_through_layer_draw(monkeypatch):
    # one way to draw random numbers for every layer (Layer.draw: host draws, copied to
    # the device), so dropout's masks follow the same rules as every other layer's draws
    from singa_core.layer import Layer

    calls = []
    real = Layer.draw

    def spy(self, out, method="random"):
        calls.append((self.name, out.shape, method))
        real(self, out, method)

    monkeypatch.setattr(Layer, "draw", spy)
    src = SourceLayer(np.ones((6, 7)))
    layer = build(DropoutLayer, 'name: "d"', [src], seed=4)
    layer.forward(kTrain | kForward, [src])
    assert calls == [("d", (6, 7), "random")]


def test_the_same_masks_on_the_stand_in_device():
    # the draws are made on the host, so a device and the CPU drop the same units
    from singa_core.device import standin_device, to_host, using_device

    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    src = SourceLayer(x)
    cpu = build(DropoutLayer, 'name: "d" dropout_conf { dropout_ratio: 0.4 }', [src], seed=9)
    with using_device(standin_device()):
        dsrc = SourceLayer(x)
        dev = build(DropoutLayer, 'name: "d" dropout_conf { dropout_ratio: 0.4 }', [dsrc], seed=9)
        for _ in range(2):
            cpu.forward(kTrain | kForward, [src])
            dev.forward(kTrain | kForward, [dsrc])
            np.testing.assert_array_equal(to_host(dev.mask), cpu.mask)
            np.testing.assert_array_equal(to_host(dev.data), cpu.data)


def test_identity_outside_training():
    src = SourceLayer(np.random.default_rng(1).standard_normal((4, 5)))
    layer = build(DropoutLayer, 'name: "d"', [src])
    state = layer.ctx.rng.bit_generator.state
    layer.forward(kTest | kForward, [src])
    np.testing.assert_array_equal(layer.data, src.data)
    assert layer.ctx.rng.bit_generator.state == state  # no randomness used
    layer.grad[...] = 3.0
    layer.backward(kTest | kBackward, [src])
    np.testing.assert_array_equal(src.grad, 3.0)


def test_gradient_check():
    src = SourceLayer(np.random.default_rng(2).standard_normal((4, 6)))
    GradientChecker().check(build(DropoutLayer, 'name: "d"', [src]), [src])


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_bad_ratio_is_an_error(ratio):
    layer = DropoutLayer(
        layer_conf(f'name: "d" dropout_conf {{ dropout_ratio: {ratio} }}'), make_ctx()
    )
    with pytest.raises(SingaError, match="dropout_ratio"):
        layer.setup([SourceLayer(np.zeros((2, 2)))])


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        DropoutLayer(layer_conf('name: "d"'), make_ctx()).setup([])


def test_no_array_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(DropoutLayer, 'name: "d"', [src])

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    assert peak_bytes(step) < 40_000  # arrays are 512 KB (bool→float cast buffer ≤ 32 KB)


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(2).standard_normal((4, 6)))
    return GradCase(build(DropoutLayer, 'name: "d"', [src]), [src])


GRADIENT_CASES = {"kDropout": _case}
