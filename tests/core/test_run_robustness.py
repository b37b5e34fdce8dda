"""Issue 21's small ones: a full disk under metrics.jsonl, records without labels."""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

from singa_core import Job
from singa_core.commands.cli import app
from singa_core.errors import SingaError
from singa_core.running import checkpoint as ck
from singa_core.schema import common_pb2

runner = CliRunner()
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@needs_dev_full
def test_metrics_file_linked_to_a_device_exits_2_naming_the_file(small_job):
    """A metrics.jsonl that is a link to /dev/full is refused as a device (issue 30: singa
    writes only regular files); a really full disk at the start: test_side_writers.py."""
    conf, ws = small_job(steps=5)
    ws.mkdir()
    (ws / "metrics.jsonl").symlink_to("/dev/full")
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 2, res.output
    assert f"cannot write metrics file {ws / 'metrics.jsonl'}: it is a character device" in (
        res.output
    )
    assert "help:" in res.output and (ws / "metrics.jsonl").is_symlink()
    assert res.exception is None or isinstance(res.exception, SystemExit)


@needs_dev_full
def test_full_disk_mid_run_keeps_the_last_checkpoint(small_job):
    conf, ws = small_job(steps=40, checkpoint_freq=10)
    job = Job.from_file(conf, seed=1, quiet=True, tensorboard=False)
    full = os.open("/dev/full", os.O_WRONLY)

    def disk_fills(ev):
        if ev.step == 20:  # from now on, metrics.jsonl's descriptor writes to /dev/full
            fd = next(
                int(f)
                for f in os.listdir("/proc/self/fd")
                if os.path.realpath(f"/proc/self/fd/{f}") == str(ws / "metrics.jsonl")
            )
            os.dup2(full, fd)

    job.on("checkpoint", disk_fills)
    try:
        with pytest.raises(SingaError) as info:
            job.train()
    finally:
        os.close(full)
    assert "No space left on device" in info.value.message
    assert str(ws / "metrics.jsonl") in info.value.message
    steps = ck.checkpoint_steps(ws)
    assert max(steps) == 20
    ck.verify_checkpoint(steps[20])  # whole and verified
    res = runner.invoke(app, ["train", str(conf), "--resume", "-q", "--no-tensorboard"])
    assert res.exit_code == 0, res.output


def write_records(path, n, missing_at=None):
    import struct

    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        for i in range(n):
            rec = common_pb2.RecordProto()
            rec.data.extend(rng.normal(size=4).tolist())
            if i != missing_at:
                rec.label = int(i % 3)
            key, value = f"rec{i:04d}".encode(), rec.SerializeToString()
            f.write(struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(value)) + value)
    return path


RECORD_JOB = """
name: "records"
train_steps: 6
disp_freq: 0
cluster {{ workspace: "{ws}" }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.01 }} }}
train_one_batch {{ alg: kBP }}
neuralnet {{
  layer {{ name: "data" type: kRecordInput
          store_conf {{ backend: "kvfile" path: "{data}" batchsize: 4 shape: 4 {extra} }} }}
  layer {{ name: "ip" type: kInnerProduct srclayers: "data"
          innerproduct_conf {{ num_output: 3 }}
          param {{ name: "w" init {{ type: kGaussian std: 0.1 }} }}
          param {{ name: "b" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip" srclayers: "data" }}
}}
"""


def test_record_without_label_is_a_located_error_with_its_key(tmp_path):
    data = write_records(tmp_path / "data.bin", 20, missing_at=9)
    conf = tmp_path / "job.conf"
    conf.write_text(RECORD_JOB.format(ws=tmp_path / "ws", data=data, extra=""))
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 2, res.output
    assert "record 'rec0009'" in res.output and "has no label field" in res.output
    assert f"{conf}:" in res.output and "has_label: false" in res.output


def test_store_without_labels_feeding_a_loss_says_so(tmp_path):
    data = write_records(tmp_path / "data.bin", 20, missing_at=9)
    conf = tmp_path / "job.conf"
    conf.write_text(RECORD_JOB.format(ws=tmp_path / "ws", data=data, extra="has_label: false"))
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 2, res.output
    assert "provides no labels" in res.output


def test_labelled_records_train(tmp_path):
    data = write_records(tmp_path / "data.bin", 20)
    conf = tmp_path / "job.conf"
    conf.write_text(RECORD_JOB.format(ws=tmp_path / "ws", data=data, extra=""))
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("prefetching", ["false", "true"])
def test_encoded_record_without_label_is_a_located_error_with_its_key(tmp_path, prefetching):
    pytest.importorskip("PIL")
    from singa_builtins._imaging import encode
    from singa_builtins.stores.kvfile import KVFileStore

    from singa_core.schema import common_pb2
    from singa_core.store import KCREATE

    rng = np.random.default_rng(0)
    store = KVFileStore()
    store.open(str(tmp_path / "png.bin"), KCREATE)
    for i in range(12):
        img = rng.integers(0, 256, size=(3, 2, 2), dtype=np.uint8)
        rec = common_pb2.RecordProto(shape=[3, 2, 2], pixel=encode(img, "PNG"))
        if i != 5:
            rec.label = i % 3
        store.write(b"png%04d" % i, rec.SerializeToString())
    store.close()
    conf = tmp_path / "job.conf"
    text = RECORD_JOB.format(
        ws=tmp_path / "ws", data=tmp_path / "png.bin", extra=f"prefetching: {prefetching}"
    ).replace("shape: 4", "shape: 3 shape: 2 shape: 2 encoded: true")
    conf.write_text(text)
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 2, res.output
    assert "record 'png0005'" in res.output and "has no label field" in res.output
