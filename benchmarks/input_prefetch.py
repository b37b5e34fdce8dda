"""Input that never stalls: the CIFAR-10 step on JPEG-encoded records, with prefetching,
against the same step on pre-decoded records (issue 24's acceptance: within 5%).

    python benchmarks/input_prefetch.py [--rounds 6] [--steps 10] [--warmup 3]
                                        [--threads 1] [--images 5000] [--quality 90]

The net is SINGA's examples/cifar10/job.conf (batch 100) with a kImagePreprocess layer
(random 28x28 crop + mirror) between the data layer and conv1. Three step functions are
timed in alternating rounds (the same run, so a drifting machine affects them alike):

* ``decoded``: kRecordInput over raw pixel records (what ``singa data cifar10`` writes);
* ``jpeg+prefetch``: the first ``--images`` training images as JPEG files in the records
  (``encoded: true``, ``prefetching: true``): reading, JPEG decoding, the mean subtraction
  and the crop/mirror run in the background thread while the step trains;
* ``jpeg``: the same records with ``prefetching: false`` (all of that in the step).

It prints the machine facts, each median ms/step and the ratios to ``decoded``. The BLAS
threads default to 1 so that the prefetch thread has a core on a 2-core machine; pass
``--threads`` to change it. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import (
    REPO,
    cifar10_stores,
    interleaved,
    load_average,
    median_ms,
    singa_train_step,
    standard_args,
    summary,
)

CROP = """  layer {
    name: "crop"
    type: kImagePreprocess
    srclayers: "data"
    rgbimage_conf { cropsize: 28 mirror: true }
  }
  layer {
    name: "conv1"
    type: kCConvolution
    srclayers: "crop\""""


def crop_conf(folder: Path) -> Path:
    """examples/cifar10/job.conf with the crop + mirror layer in front of conv1."""
    text = (REPO / "examples" / "cifar10" / "job.conf").read_text()
    head = '  layer {\n    name: "conv1"\n    type: kCConvolution\n    srclayers: "data"'
    if head not in text:
        sys.exit("examples/cifar10/job.conf changed: cannot insert the crop layer")
    path = folder / "crop.conf"
    path.write_text(text.replace(head, CROP, 1))
    return path


def jpeg_records(stores: Path, out: Path, n: int, quality: int) -> Path:
    """The first ``n`` records of train_data.bin with their pixels as JPEG files."""
    import numpy as np
    from singa_builtins._imaging import encode
    from singa_builtins.stores.kvfile import KVFileStore

    from singa_core.schema import common_pb2
    from singa_core.store import KCREATE, KREAD

    src, dst = KVFileStore(), KVFileStore()
    src.open(str(stores / "train_data.bin"), KREAD)
    dst.open(str(out), KCREATE)
    rec = common_pb2.RecordProto()
    for _ in range(n):
        got = src.read()
        if got is None:
            break
        key, value = got
        rec.ParseFromString(value)
        img = np.frombuffer(rec.pixel, dtype=np.uint8).reshape(3, 32, 32)
        rec.pixel = encode(img, "JPEG", quality=quality)
        dst.write(key, rec.SerializeToString())
    src.close()
    dst.close()
    return out


def main() -> None:
    def extra(ap):
        ap.add_argument("--images", type=int, default=5000, help="JPEG records to write")
        ap.add_argument("--quality", type=int, default=90, help="JPEG quality")

    args = standard_args(
        "CIFAR-10 step: JPEG records with prefetching vs pre-decoded records",
        rounds=6,
        steps=10,
        warmup=3,
        threads=1,
        extra=extra,
    )
    print(f"({load_average()} at the start)")
    stores = cifar10_stores()
    tmp = Path(tempfile.mkdtemp(prefix="singa-bench-prefetch-"))
    conf = crop_conf(tmp)
    jpeg = jpeg_records(stores, tmp / "train_jpeg.bin", args.images, args.quality)
    base = [
        f"neuralnet.layer[0].store_conf.mean_file={stores / 'image_mean.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        f"neuralnet.layer[1].store_conf.mean_file={stores / 'image_mean.bin'}",
    ]
    path = "neuralnet.layer[0].store_conf.path"
    flags = "neuralnet.layer[0].store_conf"
    fns = {
        "decoded": singa_train_step(
            conf, [*base, f"{path}={stores / 'train_data.bin'}"], args.threads
        ),
        "jpeg+prefetch": singa_train_step(
            conf,
            [*base, f"{path}={jpeg}", f"{flags}.encoded=true", f"{flags}.prefetching=true"],
            args.threads,
        ),
        "jpeg": singa_train_step(
            conf,
            [*base, f"{path}={jpeg}", f"{flags}.encoded=true", f"{flags}.prefetching=false"],
            args.threads,
        ),
    }
    times = interleaved(fns, args.rounds, args.steps, args.warmup)
    for name, t in times.items():
        print(f"{name:14s} CIFAR-10 + crop/mirror, {args.threads} thread(s): {summary(t)}")
    ref = median_ms(times["decoded"])
    for name in ("jpeg+prefetch", "jpeg"):
        print(f"ratio {name}/decoded (median): {median_ms(times[name]) / ref:.3f}x")
    print(f"({load_average()} at the end)")


if __name__ == "__main__":
    main()
