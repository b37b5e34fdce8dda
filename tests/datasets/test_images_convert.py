"""`singa data images`: class folders or a listfile.txt -> RecordProto kvfiles, the mean,
labels.txt and an example job.conf; --resize/--gray/--shuffle/--val-fraction/--encoded;
unreadable images listed and skipped; located errors with exit 2; the same output with one
or several processes. End to end: 2,000 real CIFAR-10 test images written as PNG files
train the CIFAR-10 example net exactly as the same images from the cifar10 converter."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import REPO, invoke_singa, singa_ok
from singa_builtins.datasets import images as images_mod
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.schema import common_pb2
from singa_core.store import KREAD

Image = pytest.importorskip("PIL.Image")

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def cifar_test_images(data_dir, n):
    raw = np.fromfile(data_dir / "cifar10" / "test_batch.bin", dtype=np.uint8, count=3073 * n)
    raw = raw.reshape(n, 3073)
    return raw[:, 1:].reshape(n, 3, 32, 32), raw[:, 0].astype(int)


def write_png_folder(root, pixels, labels):
    """CIFAR images as PNG files in one folder per class: root/<class>/<index>.png."""
    for i, (img, lab) in enumerate(zip(pixels, labels, strict=True)):
        folder = root / CLASSES[lab]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img.transpose(1, 2, 0)).save(folder / f"{i:05d}.png")
    return root


def read_store(path):
    store = KVFileStore()
    store.open(str(path), KREAD)
    out = []
    while (rec := store.read()) is not None:
        out.append(rec)
    store.close()
    return out


def records(path):
    out = []
    for key, value in read_store(path):
        rec = common_pb2.RecordProto()
        rec.ParseFromString(value)
        out.append((key.decode(), rec))
    return out


def index_of(key: str) -> int:
    """The CIFAR index of a record written from <class>/<index>.png."""
    return int(key.rsplit("/", 1)[1].split(".")[0])


@pytest.fixture(scope="module")
def small_folder(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs") / "src"
    pixels, labels = cifar_test_images(data_dir, 80)
    write_png_folder(root, pixels, labels)
    (root / "cat" / "broken.png").write_bytes(b"not a png at all")
    (root / "dog" / "notes.txt").write_text("not an image: ignored")
    return root, pixels, labels


def test_class_folders_to_records(small_folder, tmp_path):
    root, pixels, labels = small_folder
    res = singa_ok("data", "images", root, "--out", tmp_path)
    assert "skipped 1 unreadable image(s)" in res.output and "broken.png" in res.output
    assert "Traceback" not in res.output
    assert (tmp_path / "labels.txt").read_text().splitlines() == CLASSES
    recs = records(tmp_path / "train_data.bin")
    assert len(recs) == 80 and not (tmp_path / "test_data.bin").exists()
    keys = [k for k, _ in recs]
    # no --shuffle: class order, then path order
    assert [r.label for _, r in recs] == sorted(labels.tolist())
    assert keys[0].startswith("00000000_airplane/")
    for key, rec in recs:  # byte for byte the cifar10 converter's record for that image
        i = index_of(key)
        want = common_pb2.RecordProto(
            shape=[3, 32, 32], label=int(labels[i]), pixel=pixels[i].tobytes()
        )
        assert rec.SerializeToString() == want.SerializeToString()
    ((_, mean_value),) = read_store(tmp_path / "image_mean.bin")
    mean = common_pb2.RecordProto()
    mean.ParseFromString(mean_value)
    assert list(mean.shape) == [3, 32, 32]
    np.testing.assert_allclose(
        mean.data, pixels.reshape(80, -1).mean(axis=0, dtype=np.float64), rtol=1e-6
    )
    # the example job.conf is a valid job for these stores
    res = singa_ok("train", tmp_path / "job.conf", "--dry-run")
    assert "ip1" in res.output


def test_split_shuffle_resize_gray(small_folder, tmp_path):
    root, pixels, labels = small_folder
    args = ["data", "images", root, "--out", tmp_path, "--val-fraction", "0.25", "--shuffle"]
    singa_ok(*args, "--resize", "16", "12", "--gray", "--seed", "3")
    train, held = records(tmp_path / "train_data.bin"), records(tmp_path / "test_data.bin")
    assert len(train) + len(held) == 80
    counts = np.bincount(labels, minlength=10)
    held_counts = np.bincount([r.label for _, r in held], minlength=10)
    np.testing.assert_array_equal(held_counts, np.round(0.25 * counts).astype(int))  # per class
    assert {index_of(k) for k, _ in train}.isdisjoint(index_of(k) for k, _ in held)
    assert [r.label for _, r in train] != sorted(r.label for _, r in train)  # shuffled
    assert all(list(r.shape) == [1, 12, 16] and len(r.pixel) == 192 for _, r in train + held)
    key, rec = train[0]
    grey = Image.open(root / key.split("_", 1)[1]).convert("L").resize((16, 12), Image.BILINEAR)
    assert rec.pixel == np.asarray(grey).tobytes()
    # the same seed gives the same stores; the job.conf says the shape
    again = tmp_path / "again"
    singa_ok(*args[:4], again, *args[5:], "--resize", "16", "12", "--gray", "--seed", "3")
    assert (again / "train_data.bin").read_bytes() == (tmp_path / "train_data.bin").read_bytes()
    assert "shape: 1\n      shape: 12\n      shape: 16" in (tmp_path / "job.conf").read_text()


def test_encoded_records_keep_the_files(small_folder, tmp_path):
    root, pixels, labels = small_folder
    singa_ok("data", "images", root, "--out", tmp_path, "--encoded")
    recs = records(tmp_path / "train_data.bin")
    key, rec = recs[5]
    assert rec.pixel == (root / key.split("_", 1)[1]).read_bytes()  # the PNG file itself
    assert "encoded: true" in (tmp_path / "job.conf").read_text()
    # kRecordInput decodes them into the same values as the raw records
    from singa_builtins.layers.record_input import RecordInputLayer

    from singa_core.layer import kForward, kTrain
    from singa_core.plugin_host.host import get_host
    from singa_core.testing import layer_conf, make_ctx

    conf = layer_conf(
        f'name: "d" type: kRecordInput store_conf {{ backend: "kvfile" batchsize: 80 '
        f'path: "{tmp_path / "train_data.bin"}" shape: 3 shape: 32 shape: 32 encoded: true }}'
    )
    layer = RecordInputLayer(conf, make_ctx(0, get_plugin=get_host().get))
    layer.setup([])
    assert layer.prefetching  # on by default for encoded records
    layer.forward(kTrain | kForward, [])
    layer.close()
    for k, (key, _) in enumerate(recs):
        np.testing.assert_array_equal(layer.data[k], pixels[index_of(key)])
    assert list(layer.aux) == [r.label for _, r in recs]


def test_listfile(small_folder, tmp_path):
    root, pixels, labels = small_folder
    src = tmp_path / "src"
    src.mkdir()
    lines = ["# path label", ""]
    for i in range(6):
        Image.fromarray(pixels[i].transpose(1, 2, 0)).save(src / f"img {i}.png")
        lines.append(f"img {i}.png {labels[i]}")
    (src / "listfile.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    singa_ok("data", "images", src, "--out", out)
    recs = records(out / "train_data.bin")
    assert sorted(r.label for _, r in recs) == sorted(labels[:6].tolist())
    n = max(labels[:6]) + 1
    assert (out / "labels.txt").read_text().splitlines() == [str(i) for i in range(n)]
    (src / "listfile.txt").write_text("img 0.png cat\n")
    res = invoke_singa("data", "images", src, "--out", out)
    assert res.exit_code == 2 and "listfile.txt:1" in res.output and "help:" in res.output


def test_sizes_must_agree_without_resize(small_folder, tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    Image.new("RGB", (8, 8)).save(src / "a" / "1.png")
    Image.new("RGB", (8, 8), (255, 0, 0)).save(src / "b" / "2.jpg")
    Image.new("RGB", (9, 8)).save(src / "b" / "3.png")
    res = singa_ok("data", "images", src, "--out", tmp_path / "out")
    assert "3.png: is 9x8, but the first image is 8x8 (use --resize W H)" in res.output
    assert len(records(tmp_path / "out" / "train_data.bin")) == 2


def test_user_errors_exit_2_with_help(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    o = tmp_path / "o"
    cases = [
        (["data", "images", tmp_path / "nowhere", "--out", o], "no such folder"),
        (["data", "images", bare, "--out", o], "no class subfolders"),
        (["data", "images", bare, "--out", o, "--val-fraction", "1"], "below 1"),
        (["data", "images", bare, "--out", o, "--resize", "3"], "--resize"),
        (["data", "images", bare, "--out", o, "--bogus"], "unrecognized"),
        (["data", "mnist", "extra", "--out", o], "takes no arguments"),
    ]
    for args, said in cases:
        res = invoke_singa(*args)
        assert res.exit_code == 2, (args, res.output)
        assert said in res.output and "help:" in res.output, res.output
        assert "Traceback" not in res.output
    empty = tmp_path / "empty" / "cls"
    empty.mkdir(parents=True)
    (empty / "x.png").write_bytes(b"")
    res = invoke_singa("data", "images", empty.parent, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "none of the 1 images" in res.output


def test_processes_write_what_one_process_writes(data_dir, tmp_path, monkeypatch):
    pixels, labels = cifar_test_images(data_dir, 200)  # 4 chunks
    root = write_png_folder(tmp_path / "src", pixels, labels)
    outs = {}
    for n in (1, 2):
        monkeypatch.setattr(images_mod, "worker_count", lambda n=n: n)
        out = tmp_path / f"out{n}"
        res = singa_ok("data", "images", root, "--out", out, "--shuffle", "--val-fraction", ".1")
        assert ("images in 2 processes" in res.output) == (n > 1)
        outs[n] = [(out / f).read_bytes() for f in ("train_data.bin", "test_data.bin")]
    assert outs[1] == outs[2]
    assert images_mod.worker_count.__defaults__ or True
    monkeypatch.undo()
    assert images_mod.worker_count() == len(os.sched_getaffinity(0))


# -- acceptance ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cifar_stores(data_dir, tmp_path_factory):
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("cifar10")
    prepare_dataset(get_host().get("dataset", "cifar10")(), out, data_dir / "cifar10")
    return out


def write_like(path, keys, source_records):
    """A kvfile of the cifar10 converter's records for ``keys`` (image indices), in order."""
    from singa_core.store import KCREATE

    store = KVFileStore()
    store.open(str(path), KCREATE)
    for n, i in enumerate(keys):
        store.write(b"%05d" % n, source_records[i])
    store.close()
    return path


STEPS = 60


def train_and_test(conf, train, test, mean, ws):
    sets = {
        "neuralnet.layer[0].store_conf.path": train,
        "neuralnet.layer[0].store_conf.mean_file": mean,
        "neuralnet.layer[1].store_conf.path": test,
        "neuralnet.layer[1].store_conf.mean_file": mean,
        "cluster.workspace": ws,
        "train_steps": STEPS,
        "test_steps": 0,
        "disp_freq": 20,
        "num_openblas_threads": 1,
    }
    over = [a for k, v in sets.items() for a in ("-o", f"{k}={v}")]
    train_out = singa_ok("train", conf, "--seed", "0", *over).output
    res = singa_ok("test", conf, "--steps", "4", *over)  # the 400 held-out images
    return float(res.output.split("accuracy = ")[1].split()[0].rstrip(",")), train_out


@pytest.mark.slow
def test_png_folder_trains_the_cifar10_net_like_the_cifar10_converter(
    data_dir, cifar_stores, tmp_path
):
    pixels, labels = cifar_test_images(data_dir, 2000)
    root = write_png_folder(tmp_path / "png", pixels, labels)
    out = tmp_path / "images"
    res = singa_ok(
        "data", "images", root, "--out", out, "--shuffle", "--val-fraction", "0.2", "--seed", "1"
    )
    assert "skipped" not in res.output
    train_keys = [index_of(k) for k, _ in records(out / "train_data.bin")]
    held_keys = [index_of(k) for k, _ in records(out / "test_data.bin")]
    assert len(train_keys) + len(held_keys) == 2000
    assert abs(len(held_keys) - 400) <= 5  # a fifth of each class, rounded per class
    # the same images, in the same order, as the cifar10 converter wrote them
    converted = [v for _, v in read_store(cifar_stores / "test_data.bin")][:2000]
    ref = tmp_path / "ref"
    ref.mkdir()
    write_like(ref / "train_data.bin", train_keys, converted)
    write_like(ref / "test_data.bin", held_keys, converted)
    assert [v for _, v in read_store(out / "train_data.bin")] == [
        v for _, v in read_store(ref / "train_data.bin")
    ]
    conf = REPO / "examples" / "cifar10" / "job.conf"
    mean = out / "image_mean.bin"
    acc_images, log_images = train_and_test(
        conf, out / "train_data.bin", out / "test_data.bin", mean, tmp_path / "ws1"
    )
    acc_ref, log_ref = train_and_test(
        conf, ref / "train_data.bin", ref / "test_data.bin", mean, tmp_path / "ws2"
    )
    print(f"held-out accuracy after {STEPS} steps: images {acc_images}, cifar10 {acc_ref}")
    assert abs(acc_images - acc_ref) <= 0.01
    losses = [float(x.split(",")[0]) for x in log_images.split("Train step-")[1:] for x in
              [x.split("loss = ")[1]]]  # fmt: skip
    assert losses[-1] < losses[0]  # it trains
    assert acc_images > 0.1, acc_images  # above chance on the held-out images
