"""The job.conf `singa data images` writes is sized to the data: each test pass reads the
held-out images once (issue 31: 100 records a step on a 48-image test set counted 52 repeats
in every accuracy), and a comment says how many epochs train_steps is."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import singa_ok
from singa_builtins.datasets.images import held_out_batching as batching

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("held", [1, 7, 48, 97, 100, 101, 199, 250, 1000, 10000])
def test_a_test_pass_reads_the_held_out_images_once(held):
    batch, steps = batching(held)
    assert 1 <= batch <= 100 and steps == -(-held // batch)
    assert held <= batch * steps < held + steps  # once; at most steps-1 read twice
    if any(held % b == 0 for b in range(50, 101)) or held < 100:
        assert batch * steps == held  # exactly once where a batchsize divides it


def test_the_written_job_conf_states_epochs_and_reads_the_test_set_once(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    for c in ("a", "b", "c"):
        (src / c).mkdir(parents=True)
        for i in range(80):
            pixels = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(src / c / f"{i}.png")
    out = tmp_path / "out"
    singa_ok("data", "images", src, "--out", out, "--val-fraction", "0.2")
    text = (out / "job.conf").read_text()
    # 16 of each class held out: 48 test images, 192 training images
    assert "# train_steps 1000 x batchsize 100 = 520.8 epochs of the 192 training images" in text
    assert "# test_steps 1 x batchsize 48: each test pass reads the 48 held-out images once" in text
    assert re.search(r"test_steps: 1\n", text)
    test_layer = text[text.index("test_data.bin") :]
    assert "batchsize: 48" in test_layer[: test_layer.index("include")]
    res = singa_ok("train", out / "job.conf", "--dry-run")
    assert "ip1" in res.output
