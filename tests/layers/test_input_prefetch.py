"""store_conf.prefetching: the next batches are read, decoded and augmented (kImagePreprocess's
random crop and mirror) in a background thread, and training is exactly what it is without:
the same records in the same order, the same random draws, the same parameters; a
checkpoint written while batches are queued resumes exactly; errors surface at the step
whose batch holds the bad record; a rewind or a phase change restarts the thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import singa_ok
from singa_builtins._imaging import encode
from singa_builtins.layers.image_preprocess import ImagePreprocessLayer
from singa_builtins.layers.record_input import RecordInputLayer
from singa_builtins.stores.kvfile import KVFileStore
from test_layer_shard_data import cifar_images

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.running import checkpoint as ck
from singa_core.schema import common_pb2
from singa_core.store import KCREATE
from singa_core.testing import layer_conf, make_ctx

pytest.importorskip("PIL")


def write_records(path, pixels, labels, *, encoded, bad_at=None):
    store = KVFileStore()
    store.open(str(path), KCREATE)
    for i, (img, lab) in enumerate(zip(pixels, labels, strict=True)):
        pixel = encode(img, "JPEG", quality=90) if encoded else img.tobytes()
        if i == bad_at:
            pixel = b"\xff\xd8 broken jpeg"
        rec = common_pb2.RecordProto(shape=list(img.shape), label=int(lab), pixel=pixel)
        store.write(b"%05d" % i, rec.SerializeToString())
    store.close()
    return path


@pytest.fixture(scope="module")
def cifar_jpeg(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("jpeg")
    pixels, labels = cifar_images(data_dir, 300)
    write_records(out / "train.bin", pixels[:240], labels[:240], encoded=True)
    write_records(out / "test.bin", pixels[240:], labels[240:], encoded=True)
    return out


def ctx(seed=0, **kw):
    return make_ctx(seed, get_plugin=get_host().get, locate=lambda f=None: f"job.conf:{f}", **kw)


def pair(path, *, prefetch, seed=0, batch=8, extra=""):
    """kRecordInput (encoded JPEG) -> kImagePreprocess (crop 28, mirror)."""
    conf = layer_conf(
        f'name: "data" type: kRecordInput store_conf {{ backend: "kvfile" path: "{path}" '
        f"batchsize: {batch} shape: 3 shape: 32 shape: 32 encoded: true random_skip: 7 "
        f"prefetching: {'true' if prefetch else 'false'} {extra} }}"
    )
    data = RecordInputLayer(conf, ctx(seed))
    data.setup([])
    pre = ImagePreprocessLayer(
        layer_conf('name: "pre" rgbimage_conf { cropsize: 28 mirror: true scale: 0.5 }'),
        ctx(seed + 1),
    )
    pre.setup([data])
    return data, pre


def step(data, pre, phase=kTrain):
    data.forward(phase | kForward, [])
    pre.forward(phase | kForward, [data])
    return pre.data.copy(), data.aux.copy()


def test_same_batches_and_draws_with_and_without(cifar_jpeg):
    a = pair(cifar_jpeg / "train.bin", prefetch=False)
    b = pair(cifar_jpeg / "train.bin", prefetch=True)
    assert not a[1].staged and b[1].staged  # the crop runs in b's prefetch thread
    for k in range(40):  # wraps around the 240 records
        phase = kTest if k % 9 == 8 else kTrain  # a phase change restarts the thread
        x, y = step(*a, phase), step(*b, phase)
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[1], y[1])
        assert a[0].state_dict() == b[0].state_dict()
        for la, lb in zip(a, b, strict=True):
            assert la.ctx.rng.bit_generator.state == lb.ctx.rng.bit_generator.state
    b[0].close()
    assert not [t for t in threading.enumerate() if t.name.startswith("singa-prefetch-data")]


def test_resume_and_rewind_mid_queue(cifar_jpeg):
    a = pair(cifar_jpeg / "train.bin", prefetch=True)
    for _ in range(3):
        step(*a)
    state = a[0].state_dict()
    rngs = [layer.ctx.rng.bit_generator.state for layer in a]
    skip = int(np.random.default_rng(0).integers(0, 7 + 1))  # random_skip: 7, seed 0
    assert state["position"] == skip + 3 * 8  # consumed, though the thread has read ahead
    want = [step(*a) for _ in range(5)]
    # a new pair restored as the checkpoint loader does (state, then the generators)
    b = pair(cifar_jpeg / "train.bin", prefetch=True, seed=42)
    b[0].load_state_dict(state)
    for layer, rng in zip(b, rngs, strict=True):
        layer.ctx.rng.bit_generator.state = rng
    got = [step(*b) for _ in range(5)]
    # and the same pair rewound (an evaluation pass cut short by Ctrl-C)
    a[0].load_state_dict(state)
    for layer, rng in zip(a, rngs, strict=True):
        layer.ctx.rng.bit_generator.state = rng
    again = [step(*a) for _ in range(5)]
    for w, g, r in zip(want, got, again, strict=True):
        np.testing.assert_array_equal(w[0], g[0])
        np.testing.assert_array_equal(w[0], r[0])
    a[0].close()
    b[0].close()


def test_a_bad_record_fails_the_step_that_reads_it(data_dir, tmp_path):
    pixels, labels = cifar_images(data_dir, 40)
    path = write_records(tmp_path / "bad.bin", pixels, labels, encoded=True, bad_at=21)
    data, pre = pair(path, prefetch=True, extra="", batch=4)
    data.random_skip = 0
    for _ in range(5):  # records 0-19: fine, although the thread reads ahead into the bad one
        step(data, pre)
    with pytest.raises(SingaError) as exc:
        step(data, pre)
    assert "record '00021'" in exc.value.message and "not a readable image" in exc.value.message
    assert exc.value.where == "job.conf:store_conf"
    data.close()


def test_prefetching_defaults(cifar_jpeg, data_dir, tmp_path):
    pixels, labels = cifar_images(data_dir, 4)
    raw = write_records(tmp_path / "raw.bin", pixels, labels, encoded=False)

    def layer(path, extra):
        conf = layer_conf(
            f'name: "d" type: kRecordInput store_conf {{ backend: "kvfile" path: "{path}" '
            f"batchsize: 2 shape: 3 shape: 32 shape: 32 {extra} }}"
        )
        lay = RecordInputLayer(conf, ctx(phase=kTrain))  # in a net: checks the first record
        lay.setup([])
        return lay.prefetching

    assert layer(cifar_jpeg / "train.bin", "encoded: true")  # decoding: on by default
    assert not layer(cifar_jpeg / "train.bin", "encoded: true prefetching: false")
    assert not layer(raw, "")
    assert layer(raw, "prefetching: true")
    with pytest.raises(SingaError) as exc:
        layer(raw, "encoded: true")  # raw bytes are not an image file
    assert "record '00000'" in exc.value.message and "not a readable image" in exc.value.message


# -- end to end ---------------------------------------------------------------------------------
def job(train, test, ws, *, prefetch: bool, steps=12) -> str:
    flag = f"prefetching: {'true' if prefetch else 'false'}"

    def data(path, phase):
        return f"""layer {{ name: "data" type: kRecordInput include: {phase}
    store_conf {{ backend: "kvfile" path: "{path}" batchsize: 16 shape: 3 shape: 32 shape: 32
      encoded: true random_skip: 20 mean_value: 120 std_value: 64 {flag} }} }}"""

    return f"""
name: "prefetch"
train_steps: {steps}
test_steps: 2
test_freq: 4
disp_freq: 2
checkpoint_freq: 6
num_openblas_threads: 1
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD momentum: 0.9 learning_rate {{ type: kFixed base_lr: 0.01 }} }}
neuralnet {{
  {data(train, "kTrain")}
  {data(test, "kTest")}
  layer {{ name: "crop" type: kImagePreprocess srclayers: "data"
    rgbimage_conf {{ cropsize: 28 mirror: true }} }}
  layer {{ name: "conv" type: kConvolution srclayers: "crop"
    convolution_conf {{ num_filters: 8 kernel: 5 stride: 2 }}
    param {{ name: "w1" init {{ type: kGaussian std: 0.05 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "relu" type: kReLU srclayers: "conv" }}
  layer {{ name: "ip" type: kInnerProduct srclayers: "relu"
    innerproduct_conf {{ num_output: 10 }}
    param {{ name: "w2" init {{ type: kGaussian std: 0.01 }} }}
    param {{ name: "b2" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip" srclayers: "data" }}
}}
cluster {{ workspace: "{ws}" }}
"""


def params(ws, step):
    return {r.name: r.value for r in ck.read_params(ws / "checkpoint" / f"step{step}-worker0")}


def metric_lines(output):
    return [line for line in output.splitlines() if line.startswith(("Train step", "Test step"))]


def test_training_equal_with_and_without_prefetching_and_resume(cifar_jpeg, tmp_path):
    runs = {}
    for prefetch in (False, True):
        ws = tmp_path / f"ws{prefetch}"
        conf = tmp_path / f"{prefetch}.conf"
        conf.write_text(
            job(cifar_jpeg / "train.bin", cifar_jpeg / "test.bin", ws, prefetch=prefetch)
        )
        runs[prefetch] = (ws, conf, metric_lines(singa_ok("train", conf, "--seed", "5").output))
    (ws0, _, lines0), (ws1, conf1, lines1) = runs[False], runs[True]
    assert lines0 == lines1 and len(lines1) >= 9
    for name, value in params(ws0, 12).items():
        np.testing.assert_array_equal(params(ws1, 12)[name], value, err_msg=name)
    # resume the prefetching run from its step-6 checkpoint: the same last 6 steps
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "checkpoint").mkdir()
    for f in (ws1 / "checkpoint").glob("step6-*"):
        (resumed / "checkpoint" / f.name).write_bytes(f.read_bytes())
    out = singa_ok("train", conf1, "--seed", "5", "--resume", "--workspace", resumed).output
    assert metric_lines(out)[-3:] == lines1[-3:]
    for name, value in params(ws1, 12).items():
        np.testing.assert_array_equal(params(resumed, 12)[name], value, err_msg=name)


def test_singa_time_shows_the_input_share(cifar_jpeg, tmp_path):
    import json

    for prefetch in (False, True):
        conf = tmp_path / f"{prefetch}.conf"
        ws = tmp_path / "ws"
        conf.write_text(
            job(cifar_jpeg / "train.bin", cifar_jpeg / "test.bin", ws, prefetch=prefetch)
        )
        out = singa_ok("time", conf, "-n", "3", "--warmup", "1").output
        line = next(x for x in out.splitlines() if x.startswith("input: "))
        assert "ms of the step" in line
        d = json.loads(singa_ok("time", conf, "-n", "2", "--warmup", "1", "--json").output)
        inputs = [r for r in d["layers"] if r["layer"] in ("data", "crop")]
        assert d["input_ms"] == pytest.approx(sum(r["forward_ms"] for r in inputs))
        assert 0 < d["input_share"] < 1
