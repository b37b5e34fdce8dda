"""kImagePreprocess: random crop offsets U{0..H−crop} and mirror with probability 1/2 in
training, central crop otherwise, scaling, shapes, real CIFAR-10 images, errors."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.image_preprocess import ImagePreprocessLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain, kVal
from singa_core.testing import GradCase, SourceLayer, layer_conf, make_ctx
from tests.layers.test_layer_shard_data import cifar_images


def prep(src, conf="", seed=0):
    layer = ImagePreprocessLayer(
        layer_conf(f'name: "image" type: kImagePreprocess rgbimage_conf {{ {conf} }}'),
        make_ctx(seed, locate=lambda field=None: f"job.conf:{field}"),
    )
    layer.setup([src])
    return layer


def run(layer, src, phase=kTrain):
    layer.forward(phase | kForward, [src])
    return layer.data


def numbered_images(n, c=2, side=4):
    """Image k, channel ch holds 1000k + 100ch + (row·side + col): every window is unique."""
    base = np.arange(side * side, dtype=np.float32).reshape(side, side)
    return (
        base[None, None]
        + 100 * np.arange(c)[None, :, None, None]
        + 1000 * np.arange(n)[:, None, None, None]
    ).astype(np.float32)


def decode(out, images, crop):
    """(h, w, mirrored) of each output image, checking it is exactly that window."""
    side = images.shape[-1]
    found = []
    for k in range(len(out)):
        o = out[k]
        mirrored = crop > 1 and o[0, 0, 1] < o[0, 0, 0]
        first = o[0, 0, -1] if mirrored else o[0, 0, 0]
        pos = int(first - 1000 * k)
        h, w = divmod(pos, side)
        window = images[k, :, h : h + crop, w : w + crop]
        np.testing.assert_array_equal(o, window[..., ::-1] if mirrored else window)
        found.append((h, w, bool(mirrored)))
    return found


def test_shapes():
    src = SourceLayer(np.zeros((2, 3, 32, 32)))
    assert ImagePreprocessLayer.type_names == ("kImagePreprocess",)
    layer = prep(src, "cropsize: 28")
    assert layer.data.shape == (2, 3, 28, 28) and layer.grad is None and layer.params == []
    assert layer.labels() is None and layer.grad_for(layer) is None
    assert prep(src).data.shape == (2, 3, 32, 32)
    assert prep(src, "cropsize: 32").data.shape == (2, 3, 32, 32)
    assert prep(src).data is not src.data  # its own buffer: the source is never scaled


def test_training_offsets_are_uniform_and_mirror_has_probability_half():
    n, crop = 3000, 2
    images = numbered_images(n)
    src = SourceLayer(images)
    layer = prep(src, "cropsize: 2 mirror: true", seed=5)
    found = decode(run(layer, src), images, crop)
    hs = np.bincount([h for h, _, _ in found], minlength=3)
    ws = np.bincount([w for _, w, _ in found], minlength=3)
    assert len(hs) == len(ws) == 3  # offsets 0..H−crop = 0..2, all reached
    assert np.all(np.abs(hs - n / 3) < 120) and np.all(np.abs(ws - n / 3) < 120), (hs, ws)
    flips = sum(m for _, _, m in found)
    assert abs(flips - n / 2) < 120
    # h and w are drawn independently
    pairs = np.bincount([3 * h + w for h, w, _ in found], minlength=9)
    assert np.all(np.abs(pairs - n / 9) < 80), pairs
    np.testing.assert_array_equal(src.data, images)  # source untouched


def test_training_is_reproducible_and_varies_per_batch():
    images = numbered_images(50)
    src = SourceLayer(images)
    a, b = (
        prep(src, "cropsize: 3 mirror: true", seed=1),
        prep(src, "cropsize: 3 mirror: true", seed=1),
    )
    first = run(a, src).copy()
    np.testing.assert_array_equal(first, run(b, src))
    assert not np.array_equal(first, run(a, src))


def test_no_mirror_unless_asked_and_mirror_without_crop():
    images = numbered_images(400)
    src = SourceLayer(images)
    found = decode(run(prep(src, "cropsize: 3"), src), images, 3)
    assert not any(m for _, _, m in found)
    found = decode(run(prep(src, "mirror: true", seed=2), src), images, 4)
    assert all((h, w) == (0, 0) for h, w, _ in found)
    assert 150 < sum(m for _, _, m in found) < 250


@pytest.mark.parametrize("phase", [kTest, kVal])
def test_central_crop_without_mirror_outside_training(phase):
    images = numbered_images(20, side=5)
    src = SourceLayer(images)
    layer = prep(src, "cropsize: 2 mirror: true scale: 0.5")
    out = run(layer, src, phase)
    # (5 − 2) // 2 = 1: rows and columns 1..2 (0.3 took the top-left corner)
    np.testing.assert_array_equal(out, images[:, :, 1:3, 1:3] * np.float32(0.5))
    layer = prep(src, "cropsize: 3")
    np.testing.assert_array_equal(run(layer, src, phase), images[:, :, 1:4, 1:4])


def test_scale_on_real_cifar_images(data_dir):
    pixels, _ = cifar_images(data_dir, 4)
    src = SourceLayer(pixels.astype(np.float32))
    layer = prep(src, "cropsize: 24 scale: 0.00390625")
    out = run(layer, src, kTest)
    want = pixels[:, :, 4:28, 4:28].astype(np.float32) * np.float32(1 / 256)
    np.testing.assert_array_equal(out, want)
    out = run(prep(src, "scale: 2"), src, kTrain)  # no crop, no mirror: just scaled
    np.testing.assert_array_equal(out, pixels * np.float32(2))


def test_strided_source():
    base = numbered_images(6, side=6)
    view = np.transpose(np.ascontiguousarray(np.transpose(base, (2, 3, 1, 0))), (3, 2, 0, 1))
    src = SourceLayer(base)
    src.data = view  # a strided view laid out like the conv layers' outputs
    out = run(prep(src, "cropsize: 4"), src, kTest)
    np.testing.assert_array_equal(out, base[:, :, 1:5, 1:5])
    decode(run(prep(src, "cropsize: 4 mirror: true"), src), base, 4)


def test_errors():
    def err(data, conf=""):
        with pytest.raises(SingaError) as exc:
            prep(SourceLayer(np.zeros(data)), conf)
        return exc.value

    assert "H == W" in err((2, 3, 32)).message
    assert "H == W" in err((2, 3, 32, 30)).message
    e = err((2, 3, 8, 8), "cropsize: 9")
    assert "cropsize 9" in e.message and e.where == "job.conf:rgbimage_conf"
    assert "scale is 0" in err((2, 3, 8, 8), "scale: 0").message
    with pytest.raises(SingaError, match="1 source"):
        ImagePreprocessLayer(layer_conf('name: "i"'), make_ctx()).setup([])


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((2, 3, 6, 6)))
    layer = prep(src, "cropsize: 4 mirror: true")
    assert src.grad_for(layer) is not None and layer.grad_for(layer) is None
    return GradCase(layer, [src], no_gradient="an input-category layer: no gradient to its source")


GRADIENT_CASES = {"kImagePreprocess": _case}
