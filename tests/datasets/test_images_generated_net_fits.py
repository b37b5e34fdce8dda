"""The job.conf `singa data images` writes trains whatever the image size (issue 38, point
6): on 8x8 images it used to be refused by `singa train` ("a 3x3 window does not fit its
1x1 input"). Each case converts a few images and trains the written job.conf a few steps."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import singa_ok
from singa_builtins.datasets.images import pooling_fits

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize(
    "h,w,kept",
    [
        (32, 32, [True, True, True]),
        (15, 15, [True, True, True]),
        (14, 14, [True, True, False]),
        (8, 8, [True, True, False]),
        (6, 6, [True, False, False]),
        (2, 2, [False, False, False]),
        (32, 8, [True, True, False]),
    ],
)
def test_which_poolings_fit(h, w, kept):
    assert pooling_fits(h, w) == kept


# (width, height) as --resize takes them
SIZES = [(8, 8), (16, 16), (32, 32), (32, 16), (12, 40), (5, 3)]


@pytest.mark.parametrize("w,h", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_written_job_conf_trains(tmp_path, w, h):
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    for c in ("a", "b"):
        (src / c).mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 256, size=(24, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(src / c / f"{i}.png")
    out = tmp_path / "out"
    singa_ok("data", "images", src, "--out", out, "--resize", w, h, "--val-fraction", "0.34")
    conf = out / "job.conf"
    text = conf.read_text()
    assert f"for 3x{h}x{w} images of 2 classes" in text
    left_out = [f"pool{i + 1}" for i, k in enumerate(pooling_fits(h, w)) if not k]
    for name in ("pool1", "pool2", "pool3"):
        assert (f'name: "{name}"' in text) == (name not in left_out), name
    if left_out:
        assert f"# {', '.join(left_out)} of the CIFAR-10 net left out" in text
    # a few steps of small batches: the net is what is tested, not the training
    conf.write_text(re.sub(r"batchsize: \d+", "batchsize: 4", text))
    res = singa_ok("train", conf, "-o", "train_steps=2", "-o", "test_steps=1", "-q")
    assert "Traceback" not in res.output
    assert (out / "workspace" / "checkpoint" / "step2-worker0").exists()
