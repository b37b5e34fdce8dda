"""What a training step asks of a GPU, observed on standin:cuda (the kernels' CUDA code run
on the CPU, each launch counted where the emulated runtime makes it; no GPU, no timing):
no device read between displayed steps, one host-to-device copy per input, and no more
kernel launches than the figures docs/performance.md gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from singa_core.testing.launches import count_training_steps

REPO = Path(__file__).resolve().parents[1]

#: the most kernels per step each net may launch (docs/performance.md: counted today)
KERNEL_BOUNDS = {"mnist/job.conf": 37, "mnist/conv.conf": 31, "rbm/rbm1.conf": 26}
COPIES = {"mnist/job.conf": 2, "mnist/conv.conf": 3, "rbm/rbm1.conf": 2}


@pytest.mark.parametrize("conf", sorted(KERNEL_BOUNDS))
def test_a_training_step_reads_nothing_back_and_copies_each_input_once(mnist_stores, conf):
    c = count_training_steps(
        REPO / "examples" / conf,
        [
            f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
            f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
        ],
    )
    assert c.reads == 0, c.by_name
    # the images and the labels, and conv.conf's learning rate (kInverse: a new rate
    # every step, 8 bytes that the update kernel reads from the device)
    assert c.to_device == COPIES[conf], c.by_name
    assert c.display_reads <= 2  # the metrics and the numeric guard's flag
    assert c.kernels <= KERNEL_BOUNDS[conf], c.by_name
