"""kLMDBData: Caffe LMDB databases of Datums (raw bytes, float_data, encoded PNG/JPEG) read
for the 0.1 parser layers, batching/cycling/random skip/resume, prefetching of encoded
Datums, Caffe mean.binaryproto files for kRGBImage, located errors; and end to end: an
LMDB written the way Caffe's convert_mnist_data writes MNIST trains the 0.1-style job to
the MNIST example's accuracy band, and encoded PNG Datums train exactly the same.

Also holds the helpers that write Caffe LMDBs (used by the store and converter tests).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import singa_ok
from singa_builtins._caffe import BlobProto, Datum
from singa_builtins._imaging import encode
from singa_builtins.layers.label import LabelLayer
from singa_builtins.layers.lmdb_data import LMDBDataLayer
from singa_builtins.layers.mnist import MnistLayer
from singa_builtins.layers.rgb_image import RGBImageLayer
from test_layer_shard_data import ctx, mnist_images

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.testing import GradCase, layer_conf

lmdb = pytest.importorskip("lmdb")


# -- helpers: LMDBs as Caffe writes them -----------------------------------------------------
def write_caffe_lmdb(path, pixels, labels, *, encoded=False, fmt="PNG", keys=None):
    """An LMDB of Datums like Caffe's convert_mnist_data/convert_imageset: ``pixels`` uint8
    [n, C, H, W]; raw ``data`` bytes, or (``encoded``) a PNG/JPEG file with encoded: true
    and no dimensions. Keys "%08d" (or ``keys``)."""
    env = lmdb.open(str(path), map_size=1 << 30)
    with env.begin(write=True) as txn:
        for i, (img, lab) in enumerate(zip(pixels, labels, strict=True)):
            if encoded:
                d = Datum(data=encode(img, fmt), label=int(lab), encoded=True)
            else:
                c, h, w = img.shape
                d = Datum(channels=c, height=h, width=w, data=img.tobytes(), label=int(lab))
            key = keys[i] if keys else b"%08d" % i
            txn.put(key, d.SerializeToString())
    env.close()
    return path


def write_mean_binaryproto(path, mean):
    """A mean.binaryproto as Caffe's compute_image_mean writes it (legacy dimensions)."""
    c, h, w = mean.shape
    blob = BlobProto(num=1, channels=c, height=h, width=w)
    blob.data.extend(mean.reshape(-1).tolist())
    path.write_bytes(blob.SerializeToString())
    return path


def lmdb_layer(path, conf="batchsize: 2", *, seed=0, setup=True):
    text = f'name: "data" type: kLMDBData lmdbdata_conf {{ path: "{path}" {conf} }}'
    layer = LMDBDataLayer(layer_conf(text), ctx(seed))
    if setup:
        layer.setup([])
    return layer


def small_images(n, c=1, h=4, w=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, c, h, w), dtype=np.uint8), np.arange(n) % 10


def fwd(layer, phase=kTrain):
    layer.forward(phase | kForward, [])
    return [r.label for r in layer.records()]


# -- the layer -------------------------------------------------------------------------------
def test_raw_datums_become_records(tmp_path):
    pixels, labels = small_images(5, c=3, h=2, w=3)
    layer = lmdb_layer(write_caffe_lmdb(tmp_path / "db", pixels, labels))
    assert LMDBDataLayer.type_names == ("kLMDBData",) and not layer.prefetching
    assert list(layer.sample().shape) == [3, 2, 3] and layer.sample().label == 0
    assert fwd(layer) == [0, 1] and layer.keys() == [b"00000000", b"00000001"]
    assert layer.records()[1].pixel == pixels[1].tobytes()
    assert fwd(layer) == [2, 3]
    assert fwd(layer, kTest) == [4, 0]  # cycles, in key order
    layer.close()


def test_float_data_datums(tmp_path):
    env = lmdb.open(str(tmp_path / "f"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(3):
            d = Datum(channels=1, height=1, width=2, label=i)
            d.float_data.extend([i + 0.5, -i])
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()
    layer = lmdb_layer(tmp_path / "f", "batchsize: 3")
    assert fwd(layer) == [0, 1, 2]
    assert list(layer.records()[2].data) == [2.5, -2.0] and not layer.records()[2].pixel


def test_parsers_read_it_like_a_shard(tmp_path, data_dir):
    pixels, labels = mnist_images(data_dir, 6)
    imgs = pixels.reshape(6, 1, 28, 28)
    src = lmdb_layer(write_caffe_lmdb(tmp_path / "m", imgs, labels), "batchsize: 3")
    mnist = MnistLayer(layer_conf('name: "m" mnist_conf { norm_a: 255 norm_b: 0 }'), ctx())
    label = LabelLayer(layer_conf('name: "l"'), ctx())
    mnist.setup([src])
    label.setup([src])
    for start in (0, 3):
        src.forward(kTrain | kForward, [])
        mnist.forward(kTrain | kForward, [src])
        label.forward(kTrain | kForward, [src])
        np.testing.assert_allclose(
            mnist.data.reshape(3, 784), pixels[start : start + 3] / np.float32(255), rtol=1e-6
        )
        assert list(label.aux) == list(labels[start : start + 3])


def test_encoded_png_and_jpeg_datums_decode(tmp_path, data_dir):
    pixels, labels = mnist_images(data_dir, 4)
    imgs = pixels.reshape(4, 1, 28, 28)
    layer = lmdb_layer(
        write_caffe_lmdb(tmp_path / "png", imgs, labels, encoded=True), "batchsize: 4"
    )
    assert layer.prefetching  # decoding is done a batch ahead by default
    assert list(layer.sample().shape) == [1, 28, 28]
    assert fwd(layer) == list(labels)
    assert [r.pixel for r in layer.records()] == [p.tobytes() for p in pixels]  # lossless
    layer.close()
    # colour: decoded as Caffe's decoder does, BGR planes
    rgb, labs = small_images(2, c=3, h=8, w=8)
    layer = lmdb_layer(write_caffe_lmdb(tmp_path / "rgb", rgb, labs, encoded=True))
    fwd(layer)
    got = np.frombuffer(layer.records()[1].pixel, dtype=np.uint8).reshape(3, 8, 8)
    np.testing.assert_array_equal(got, rgb[1][::-1])
    layer.close()


def test_random_skip_and_resume_with_prefetching(tmp_path):
    pixels, labels = small_images(23)
    for encoded in (False, True):
        path = write_caffe_lmdb(tmp_path / f"db{encoded}", pixels, labels, encoded=encoded)
        skip = int(np.random.default_rng(3).integers(0, 10 + 1))
        a = lmdb_layer(path, "batchsize: 4 random_skip: 10", seed=3)
        assert a.prefetching == encoded
        first = fwd(a)
        assert first == [(skip + i) % 10 for i in range(4)]
        state, rng = a.state_dict(), a.ctx.rng.bit_generator.state
        assert state["position"] == skip + 4  # what training has consumed, not read ahead
        want = [fwd(a) for _ in range(7)]  # wraps around the 23 records
        b = lmdb_layer(path, "batchsize: 4 random_skip: 10", seed=99)
        b.load_state_dict(state)
        b.ctx.rng.bit_generator.state = rng
        assert [fwd(b) for _ in range(7)] == want
        # a rewind (an evaluation pass cut short) restarts from the restored position
        a.load_state_dict(state)
        assert [fwd(a) for _ in range(2)] == want[:2]
        a.close()
        b.close()


def test_errors_are_located(tmp_path):
    def err(path, conf="batchsize: 1", forwards=0):
        with pytest.raises(SingaError) as exc:
            layer = lmdb_layer(path, conf)
            for _ in range(forwards):
                fwd(layer)
        return exc.value

    e = err(tmp_path / "missing")
    assert "missing" in e.message and e.where == "job.conf:lmdbdata_conf" and e.help
    (tmp_path / "empty").mkdir()
    assert "no data.mdb" in err(tmp_path / "empty").message
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "data.mdb").write_bytes(b"\x00garbage" * 1000)
    e = err(junk)
    assert "LMDB" in e.message and e.help
    assert "junk" in str(e.where) or "junk" in e.message
    # a value that is not a Datum, and a Datum whose bytes do not fit its dimensions
    env = lmdb.open(str(tmp_path / "bad"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"a-good", Datum(channels=1, height=1, width=2, data=b"ab").SerializeToString())
        txn.put(b"b-short", Datum(channels=1, height=2, width=2, data=b"ab").SerializeToString())
        txn.put(b"c-junk", b"\xff\xff\xff")
        txn.put(b"d-png", Datum(data=b"\x89PNG broken", encoded=True).SerializeToString())
    env.close()
    e = err(tmp_path / "bad", forwards=2)
    assert "record 'b-short'" in e.message and "has 2 data bytes" in e.message
    assert e.where == "job.conf:lmdbdata_conf" and "help" not in e.message and e.help
    layer = lmdb_layer(tmp_path / "bad", "batchsize: 1")
    fwd(layer)
    layer.store.seek(2)
    with pytest.raises(SingaError) as exc:
        fwd(layer)
    assert "record 'c-junk'" in exc.value.message and "not a Caffe Datum" in exc.value.message
    with pytest.raises(SingaError) as exc:
        fwd(layer)
    assert "record 'd-png'" in exc.value.message and "not a readable image" in exc.value.message


def test_damaged_database_file_names_it(tmp_path):
    pixels, labels = small_images(400, h=16, w=16)
    path = write_caffe_lmdb(tmp_path / "db", pixels, labels)
    data = bytearray((path / "data.mdb").read_bytes())
    data[8192:] = b"\xa5" * (len(data) - 8192)  # every page after the first two destroyed
    (path / "data.mdb").write_bytes(bytes(data))
    with pytest.raises(SingaError) as exc:
        layer = lmdb_layer(path, "batchsize: 50")
        for _ in range(10):
            fwd(layer)
    err = exc.value
    assert str(path) in str(err.where) + err.message and err.help


def test_rgb_image_reads_a_caffe_mean_binaryproto(tmp_path):
    pixels, labels = small_images(4, c=3, h=6, w=6)
    src = lmdb_layer(write_caffe_lmdb(tmp_path / "db", pixels, labels), "batchsize: 4")
    mean = pixels.astype(np.float32).mean(axis=0)
    meanfile = write_mean_binaryproto(tmp_path / "mean.binaryproto", mean)
    conf = f'name: "rgb" rgbimage_conf {{ meanfile: "{meanfile}" scale: 0.5 }}'
    rgb = RGBImageLayer(layer_conf(conf), ctx())
    rgb.setup([src])
    src.forward(kTest | kForward, [])
    rgb.forward(kTest | kForward, [src])
    np.testing.assert_allclose(rgb.data, (pixels - mean) * np.float32(0.5), rtol=1e-5, atol=1e-5)
    # the newer BlobShape form of a mean, and a mean of the wrong size
    blob = BlobProto()
    blob.shape.dim.extend([1, 3, 6, 6])
    blob.double_data.extend(mean.reshape(-1).astype(np.float64).tolist())
    (tmp_path / "shaped.binaryproto").write_bytes(blob.SerializeToString())
    rgb = RGBImageLayer(
        layer_conf(f'name: "r" rgbimage_conf {{ meanfile: "{tmp_path / "shaped.binaryproto"}" }}'),
        ctx(),
    )
    rgb.setup([src])
    np.testing.assert_allclose(rgb.mean, mean.reshape(-1), rtol=1e-6)
    small = write_mean_binaryproto(tmp_path / "small.binaryproto", mean[:1])
    with pytest.raises(SingaError) as exc:
        RGBImageLayer(
            layer_conf(f'name: "r" rgbimage_conf {{ meanfile: "{small}" }}'), ctx()
        ).setup([src])
    assert "holds 36 values, expected 108" in exc.value.message


# -- end to end --------------------------------------------------------------------------------
def mnist_split(data_dir, split):
    import gzip

    prefix = "train" if split == "train" else "t10k"
    with gzip.open(data_dir / "mnist" / f"{prefix}-images-idx3-ubyte.gz") as fh:
        pixels = np.frombuffer(fh.read()[16:], dtype=np.uint8).reshape(-1, 1, 28, 28)
    with gzip.open(data_dir / "mnist" / f"{prefix}-labels-idx1-ubyte.gz") as fh:
        labels = np.frombuffer(fh.read()[8:], dtype=np.uint8)
    return pixels, labels


def job_conf_01(train, test, ws, *, steps=1000, meanfile=None) -> str:
    """A 0.1-style MNIST job: kLMDBData + kMnist (or kRGBImage with a Caffe mean) + kLabel
    feeding the MNIST example's MLP (examples/mnist/job.conf) and its schedule."""
    if meanfile:
        parser = f'type: kRGBImage rgbimage_conf {{ meanfile: "{meanfile}" scale: 0.0078125 }}'
    else:
        parser = "type: kMnist mnist_conf { norm_a: 127.5 norm_b: 1 }"
    sizes = [2500, 2000, 1500, 1000, 500]
    hidden, src = "", "mnist"
    for i, n in enumerate(sizes, 1):
        hidden += f"""
  layer {{ name: "fc{i}" type: kInnerProduct srclayers: "{src}"
    innerproduct_conf {{ num_output: {n} }}
    param {{ name: "w{i}" init {{ type: kUniform low: -0.05 high: 0.05 }} }}
    param {{ name: "b{i}" init {{ type: kUniform low: -0.05 high: 0.05 }} }} }}
  layer {{ name: "tanh{i}" type: kSTanh srclayers: "fc{i}" }}"""
        src = f"tanh{i}"
    return f"""
name: "mlp-lmdb"
train_steps: {steps}
test_steps: 10
test_freq: 0
disp_freq: 100
num_openblas_threads: 1
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kStep base_lr: 0.001
  step_conf {{ change_freq: 60 gamma: 0.997 }} }} }}
neuralnet {{
  layer {{ name: "data" type: kLMDBData include: kTrain
    lmdbdata_conf {{ path: "{train}" batchsize: 64 random_skip: 5000 }} }}
  layer {{ name: "data" type: kLMDBData include: kTest
    lmdbdata_conf {{ path: "{test}" batchsize: 100 }} }}
  layer {{ name: "mnist" {parser} srclayers: "data" }}
  layer {{ name: "label" type: kLabel srclayers: "data" }}{hidden}
  layer {{ name: "fc6" type: kInnerProduct srclayers: "tanh5"
    innerproduct_conf {{ num_output: 10 }}
    param {{ name: "w6" init {{ type: kUniform low: -0.05 high: 0.05 }} }}
    param {{ name: "b6" init {{ type: kUniform low: -0.05 high: 0.05 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "fc6" srclayers: "label" }}
}}
cluster {{ workspace: "{ws}" }}
"""


def held_out_accuracy(conf, ws):
    res = singa_ok("test", conf, "--steps", "100", "-o", f"cluster.workspace={ws}")
    return float(res.output.split("accuracy = ")[1].split()[0].rstrip(","))


@pytest.fixture(scope="module")
def mnist_lmdbs(data_dir, tmp_path_factory):
    """Caffe-style MNIST LMDBs (convert_mnist_data: Datum 1x28x28 raw bytes, keys %08d)
    and the training set's mean.binaryproto (compute_image_mean)."""
    out = tmp_path_factory.mktemp("mnist_lmdb")
    train_px, train_lab = mnist_split(data_dir, "train")
    test_px, test_lab = mnist_split(data_dir, "test")
    write_caffe_lmdb(out / "mnist_train_lmdb", train_px, train_lab)
    write_caffe_lmdb(out / "mnist_test_lmdb", test_px, test_lab)
    write_mean_binaryproto(out / "mean.binaryproto", train_px.mean(axis=0, dtype=np.float64))
    return out


@pytest.mark.slow
def test_caffe_mnist_lmdb_trains_to_the_mnist_example_band(mnist_lmdbs, tmp_path):
    ws = tmp_path / "ws"
    conf = tmp_path / "job.conf"
    conf.write_text(
        job_conf_01(mnist_lmdbs / "mnist_train_lmdb", mnist_lmdbs / "mnist_test_lmdb", ws)
    )
    singa_ok("train", conf, "--seed", "0")
    acc = held_out_accuracy(conf, ws)  # all 10,000 test images
    print(f"kLMDBData + kMnist + kLabel, 1000 steps: test accuracy {acc}")
    assert 0.87 <= acc <= 0.93, acc  # the MNIST example's band (tests/test_mnist_example.py)


@pytest.mark.slow
def test_caffe_mean_binaryproto_job_learns(mnist_lmdbs, tmp_path):
    ws = tmp_path / "ws"
    conf = tmp_path / "job.conf"
    conf.write_text(
        job_conf_01(
            mnist_lmdbs / "mnist_train_lmdb",
            mnist_lmdbs / "mnist_test_lmdb",
            ws,
            steps=300,
            meanfile=mnist_lmdbs / "mean.binaryproto",
        )
    )
    singa_ok("train", conf, "--seed", "0")
    acc = held_out_accuracy(conf, ws)
    print(f"kLMDBData + kRGBImage (mean.binaryproto) + kLabel, 300 steps: accuracy {acc}")
    assert acc >= 0.75, acc


@pytest.mark.slow
def test_encoded_png_lmdb_trains_the_same(data_dir, tmp_path):
    """The same 640 MNIST images as raw and as PNG-encoded Datums: identical training."""
    pixels, labels = mnist_split(data_dir, "train")
    pixels, labels = pixels[:640], labels[:640]
    raw = write_caffe_lmdb(tmp_path / "raw", pixels, labels)
    png = write_caffe_lmdb(tmp_path / "png", pixels, labels, encoded=True)
    finals = []
    for name, db in (("raw", raw), ("png", png)):
        ws = tmp_path / f"ws-{name}"
        conf = tmp_path / f"{name}.conf"
        conf.write_text(job_conf_01(db, db, ws, steps=12).replace("random_skip: 5000", ""))
        res = singa_ok("train", conf, "--seed", "0", "-o", "checkpoint_freq=12")
        finals.append(res.output.split("Train step-")[-1].splitlines()[0])
        from singa_core.running import checkpoint as ck

        finals.append(
            {r.name: r.value for r in ck.read_params(ws / "checkpoint" / "step12-worker0")}
        )
    assert finals[0] == finals[2]  # the same last Train line
    for name, value in finals[1].items():
        np.testing.assert_array_equal(finals[3][name], value, err_msg=name)


def _case(tmp_path):
    pixels, labels = small_images(3)
    layer = lmdb_layer(write_caffe_lmdb(tmp_path / "g", pixels, labels))
    return GradCase(layer, [], no_gradient="an input layer: no sources, no gradient")


GRADIENT_CASES = {"kLMDBData": _case}
