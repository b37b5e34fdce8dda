"""``singa data images DIR --out OUT``: a folder of your own images -> SINGA's record stores
(what Caffe's ``convert_imageset`` did for Caffe users). Needs Pillow
(``pip install 'singa-classic[images]'``).

Input, either layout:

* ``DIR/<class>/<image>``: one subfolder per class (torchvision's ImageFolder layout); the
  classes are the subfolder names in sorted order (class i = the i-th name), the images
  every file with an image extension below a class folder (sorted by path);
* ``DIR/listfile.txt``: one ``path label`` line per image (``convert_imageset``'s list
  file; paths relative to DIR, labels integers from 0; blank lines and ``#`` lines skipped).

Output in ``--out``:

* ``train_data.bin``: a kvfile store of RecordProtos (``shape = [C, H, W]``, ``label``,
  ``pixel`` = the C×H×W bytes, colour as RGB planes), key ``"%08d_<path>"``;
* ``test_data.bin`` with ``--val-fraction F``: the held-out images (round(F·n) of every
  class, chosen with ``--seed``; the last ones of each class without ``--shuffle``);
* ``image_mean.bin``: the per-pixel mean of the training images (a kvfile holding one
  RecordProto under the key ``"mean"``, as ``singa data cifar10`` writes it), for
  kRecordInput's ``mean_file`` and kRGBImage's ``meanfile``; with ``--backend lmdb`` also
  ``mean_lmdb``, the same record in an LMDB database, which the job.conf names (kRecordInput
  reads its ``mean_file`` with the data's own backend);
* ``labels.txt``: line i is the name of class i (the folder name, or i for a list file);
* ``job.conf``: the CIFAR-10 example's net set up for these images and classes.

Options: ``--resize W H`` (every image resized to W×H, bilinear; without it every image
must have the size of the first), ``--gray`` (one grey-scale channel instead of RGB),
``--shuffle`` (a random record order, from ``--seed``; without it records are in class and
path order), ``--val-fraction F``, ``--encoded`` (records keep a PNG/JPEG file in ``pixel``
— the original bytes when no resize or grey conversion is needed — decoded at training
time: the example job.conf says ``encoded: true``), ``--backend lmdb`` (LMDB folders
``train_lmdb``/``test_lmdb`` instead of kvfiles), ``--seed N``.

Images that cannot be read are listed and skipped, with a count (never a traceback). A
class with no images (an empty class folder, a list file's unused label) and an image over
Pillow's decompression-bomb size are each a one-line warning.
Decoding runs in one process per CPU this process may use (``os.sched_getaffinity``).
Every file is written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from singa_core.dataset import DatasetConverter
from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.running.fileio import atomic_write_bytes
from singa_core.schema import common_pb2
from singa_core.store import KCREATE

IMAGE_EXTENSIONS = (
    ".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".pbm", ".bmp", ".gif", ".tif", ".tiff", ".webp",
)  # fmt: skip
LISTFILE = "listfile.txt"
_USAGE_HELP = (
    "usage: singa data images DIR --out OUT [--resize W H] [--gray] [--shuffle] "
    "[--val-fraction F] [--encoded] [--backend kvfile|lmdb] [--seed N]"
)
_CHUNK = 64  # images per task of a worker process


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a SingaError for the user, not argparse's exit
        raise _ArgumentError(message)


def _parser() -> _Parser:
    p = _Parser(prog="singa data images", add_help=False)
    p.add_argument("dir", type=Path, metavar="DIR", help="one subfolder of images per class")
    p.add_argument(
        "--resize", nargs=2, type=int, metavar=("W", "H"),
        help="resize every image to W x H (bilinear); without it all must have the first's size",
    )  # fmt: skip
    p.add_argument("--gray", action="store_true", help="one grey channel instead of RGB")
    p.add_argument(
        "--shuffle", action="store_true",
        help="a random record order (from --seed); default: class and path order",
    )  # fmt: skip
    p.add_argument(
        "--val-fraction", type=float, default=0.0, metavar="F",
        help="hold out round(F*n) images of every class as test_data.bin (default 0)",
    )  # fmt: skip
    p.add_argument(
        "--encoded", action="store_true",
        help="records keep the PNG/JPEG file, decoded at training time (smaller stores)",
    )  # fmt: skip
    p.add_argument(
        "--backend", choices=("kvfile", "lmdb"), default="kvfile",
        help="kvfile stores (default) or LMDB folders train_lmdb/test_lmdb",
    )  # fmt: skip
    p.add_argument(
        "--seed", type=int, default=0, metavar="N",
        help="seed of --shuffle and of the held-out choice (default 0)",
    )  # fmt: skip
    return p


def options_text() -> str:
    """DIR and every option with its help, as `singa data images --help` lists them."""
    rows = []
    for action in _parser()._actions:
        meta = action.metavar
        meta = " ".join(meta) if isinstance(meta, tuple) else meta
        if not action.option_strings:
            rows.append((meta or action.dest, action.help))
            continue
        if action.choices:
            meta = "|".join(action.choices)
        flag = action.option_strings[0]
        rows.append((f"{flag} {meta}" if action.nargs != 0 else flag, action.help))
    width = max(len(left) for left, _ in rows) + 2
    return "\n".join(f"  {left:<{width}}{text}" for left, text in rows)


# -- decoding (in worker processes) -----------------------------------------------------------
def _load(task):
    """One image: ``(index, payload bytes, [C, H, W] uint8 or None, error or None, note or
    None)``; the note says an image is over Pillow's decompression-bomb size (read anyway,
    up to twice that size, where Pillow refuses it)."""
    index, path, size, gray, encoded = task
    import io
    import warnings

    from PIL import Image

    note = None
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(raw))
        with img:
            if any(issubclass(w.category, Image.DecompressionBombWarning) for w in caught):
                w, h = img.size
                note = (
                    f"is {w}x{h} ({w * h / 1e6:.0f} megapixels), over Pillow's limit of "
                    f"{Image.MAX_IMAGE_PIXELS / 1e6:.0f} megapixels against decompression "
                    "bombs: read anyway (it takes much memory; twice the limit is refused)"
                )
            fmt = img.format
            img.load()
            conv = img.convert("L" if gray else "RGB")
            native_ok = img.mode == conv.mode or (not gray and img.mode in ("RGB", "P", "RGBA"))
            if size is not None and conv.size != tuple(size):
                conv = conv.resize(tuple(size), Image.Resampling.BILINEAR)
                native_ok = False
    except Image.UnidentifiedImageError:
        problem = "not an image file Pillow can read (unknown or damaged format)"
        return index, None, None, problem, None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return index, None, None, f"cannot be decoded ({type(exc).__name__}: {exc})", None
    arr = np.asarray(conv, dtype=np.uint8)
    chw = arr[None, :, :] if arr.ndim == 2 else np.ascontiguousarray(arr.transpose(2, 0, 1))
    if not encoded:
        return index, chw.tobytes(), chw, None, note
    if native_ok and fmt in ("PNG", "JPEG"):
        return index, raw, chw, None, note  # the file as it is
    out = io.BytesIO()
    try:
        if fmt == "JPEG":
            conv.save(out, format="JPEG", quality=95)
        else:
            conv.save(out, format="PNG")
    except (OSError, ValueError) as exc:  # decoded with damage Pillow let pass
        return index, None, None, f"cannot be re-encoded ({type(exc).__name__}: {exc})", None
    return index, out.getvalue(), chw, None, note


def _load_chunk(tasks):
    return [_load(t) for t in tasks]


def worker_count() -> int:
    """The CPUs this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def _decode_all(tasks, log):
    """Results of :func:`_load` for every task, in task order, on all usable CPUs."""
    n = worker_count()
    chunks = [tasks[i : i + _CHUNK] for i in range(0, len(tasks), _CHUNK)]
    if n == 1 or len(chunks) <= 1:
        for chunk in chunks:
            yield from _load_chunk(chunk)
        return
    log(f"decoding {len(tasks)} images in {min(n, len(chunks))} processes")
    ex = ProcessPoolExecutor(max_workers=min(n, len(chunks)), mp_context=get_context("spawn"))
    try:
        # the workers start (all of them, as map submits every chunk) with SIGINT blocked:
        # a Ctrl-C is this process's to handle (one `interrupted` line, exit 130), never a
        # KeyboardInterrupt traceback from each worker; a Ctrl-C meanwhile waits in this
        # process until the mask is restored
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            done = ex.map(_load_chunk, chunks)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        for results in done:
            yield from results
    except BaseException:  # interrupted or failed: the workers are stopped, work dropped
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            proc.terminate()  # SIGTERM: their SIGINT is blocked, and a chunk is not waited for
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


# -- the converter ----------------------------------------------------------------------------
class ImagesConverter(DatasetConverter):
    """A folder of images (class subfolders or a list file) -> SINGA record stores."""

    type_names = ("images",)
    name = "images"
    description = (
        "your own images: DIR with one subfolder per class (or a listfile.txt of 'path "
        "label' lines) -> train_data.bin, test_data.bin, image_mean.bin, labels.txt, "
        "job.conf; `singa data images DIR --out OUT [--resize W H] [--gray] [--shuffle] "
        "[--val-fraction F] [--encoded]` (needs Pillow: singa-classic[images])"
    )
    env_subdir = "images"  # without DIR: --from DIR, else $SINGA_DATA/images
    files: dict = {}

    def __init__(self) -> None:
        self.options = None

    # -- arguments --------------------------------------------------------------------------
    def options_help(self) -> str:
        return options_text()

    def configure(self, args: list[str]) -> Path:
        """Parse ``DIR`` and the options after ``singa data images``; returns DIR."""
        try:
            opts = _parser().parse_args(list(args))
        except _ArgumentError as exc:
            raise SingaError(str(exc), where="singa data images", help=_USAGE_HELP) from None
        if not 0.0 <= opts.val_fraction < 1.0:
            raise SingaError(
                f"--val-fraction must be at least 0 and below 1, got {opts.val_fraction}",
                where="--val-fraction",
                help="e.g. --val-fraction 0.2 holds out a fifth of every class",
            )
        if opts.resize is not None and min(opts.resize) <= 0:
            raise SingaError(
                f"--resize needs a positive width and height, got {opts.resize}",
                where="--resize",
                help="e.g. --resize 32 32",
            )
        self.options = opts
        return opts.dir

    # -- listing ----------------------------------------------------------------------------
    @staticmethod
    def _listing(root: Path) -> tuple[list[tuple[Path, int]], list[str]]:
        """(image path, label) pairs and the class names."""
        if not root.is_dir():
            raise SingaError(
                f"cannot read the image folder {root}: "
                + ("it is not a folder" if root.exists() else "no such folder"),
                where=str(root),
                help="DIR holds one subfolder per class (or a listfile.txt of 'path label' lines)",
            )
        listfile = root / LISTFILE
        if listfile.is_file():
            return ImagesConverter._read_listfile(root, listfile)
        classes = sorted(
            e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")
        )
        if not classes:
            raise SingaError(
                f"{root} has no class subfolders and no {LISTFILE}",
                where=str(root),
                help="put each class's images into a subfolder named after the class "
                f"(DIR/cat/1.jpg, DIR/dog/2.jpg), or list them in DIR/{LISTFILE}",
            )
        items = []
        for label, name in enumerate(classes):
            found = []
            for folder, dirs, names in os.walk(root / name):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [
                    Path(folder) / f
                    for f in names
                    if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")
                ]
            items += [(p, label) for p in sorted(found)]
        return items, classes

    @staticmethod
    def _read_listfile(root: Path, listfile: Path):
        items = []
        try:
            text = listfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SingaError(
                f"cannot read {listfile}: {exc}",
                where=str(listfile),
                help="give a readable UTF-8 list file of 'PATH LABEL' lines, one per image",
            ) from None
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            path, _, label = line.rpartition(" ")
            try:
                value = int(label)
            except ValueError:
                value = -1
            if not path.strip() or value < 0:
                raise SingaError(
                    f"line {number} is not 'path label' with a label from 0: {line!r}",
                    where=f"{listfile}:{number}",
                    help="each line names an image (relative to DIR) and its class number",
                )
            items.append((root / path.strip(), value))
        if not items:
            raise SingaError(
                f"{listfile} lists no images",
                where=str(listfile),
                help="add 'PATH LABEL' lines to it, one per image (lines starting with # are "
                "comments)",
            )
        count = max(label for _, label in items) + 1
        return items, [str(i) for i in range(count)]

    # -- splitting --------------------------------------------------------------------------
    @staticmethod
    def _split(items, classes, fraction: float, shuffle: bool, seed: int):
        """Indices of ``items`` for training and for the held-out set."""
        rng = np.random.default_rng(seed)
        train, held = [], []
        for label in range(len(classes)):
            idx = [i for i, (_, lab) in enumerate(items) if lab == label]
            k = int(round(fraction * len(idx)))
            if shuffle:
                idx = [idx[j] for j in rng.permutation(len(idx))]
            held += idx[len(idx) - k :] if k else []
            train += idx[: len(idx) - k]
        train.sort()
        held.sort()
        if shuffle:
            train = [train[j] for j in rng.permutation(len(train))]
            held = [held[j] for j in rng.permutation(len(held))]
        return train, held

    # -- converting -------------------------------------------------------------------------
    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:
        if self.options is None:
            self.configure([str(source_dir)])
        opts = self.options
        from singa_builtins._imaging import pil

        pil()  # Pillow missing: a SingaError naming the extra, before anything is read
        root, out_dir = Path(opts.dir), Path(out_dir).resolve()
        items, classes = self._listing(root)
        if not items:
            raise SingaError(
                f"no images found below {root}",
                where=str(root),
                help=f"image files end in {', '.join(IMAGE_EXTENSIONS)}",
            )
        train, held = self._split(items, classes, opts.val_fraction, opts.shuffle, opts.seed)
        log(f"{len(items)} images of {len(classes)} classes in {root}")
        self._warn_empty_classes(items, classes, root, log)
        size = tuple(opts.resize) if opts.resize else None
        tasks = [(i, str(p), size, opts.gray, opts.encoded) for i, (p, _) in enumerate(items)]
        decoded: dict[int, tuple[bytes, np.ndarray]] = {}
        skipped: list[tuple[int, str]] = []
        shape = None
        # closed however the loop ends (a Ctrl-C while a result is handled here included):
        # the worker processes are shut down, never left waiting for work at exit
        with contextlib.closing(_decode_all(tasks, log)) as results:
            for index, payload, chw, problem, note in results:
                if note is not None:
                    log(f"warning: {items[index][0]} {note}")
                if problem is None and shape is not None and chw.shape != shape:
                    problem = (
                        f"is {chw.shape[2]}x{chw.shape[1]}, but the first image is "
                        f"{shape[2]}x{shape[1]} (use --resize W H)"
                    )
                if problem is not None:
                    skipped.append((index, problem))
                    continue
                shape = shape or chw.shape
                decoded[index] = (payload, chw)
        if skipped:
            log(f"skipped {len(skipped)} unreadable image(s):")
            for index, problem in skipped:
                log(f"  {items[index][0]}: {problem}")
        if not decoded:
            raise SingaError(
                f"none of the {len(items)} images below {root} could be read",
                where=str(root),
                help="check the files (and install Pillow: pip install 'singa-classic[images]')",
            )
        train = [i for i in train if i in decoded]
        held = [i for i in held if i in decoded]
        if not train:
            raise SingaError(
                "no readable training images are left", where=str(root),
                help="lower --val-fraction or add images",
            )  # fmt: skip
        written = []
        pixel_sum = np.zeros(int(np.prod(shape)), dtype=np.int64)
        kv = opts.backend == "kvfile"
        train_path = out_dir / ("train_data.bin" if kv else "train_lmdb")
        self._write(train_path, train, items, decoded, root, shape, pixel_sum, opts.backend, log)
        written.append(train_path)
        test_path = None
        if held:
            test_path = out_dir / ("test_data.bin" if kv else "test_lmdb")
            self._write(test_path, held, items, decoded, root, shape, None, opts.backend, log)
            written.append(test_path)
        mean = (pixel_sum / len(train)).astype(np.float32)
        mean_path = out_dir / "image_mean.bin"
        self._write_mean(mean, shape, mean_path, "kvfile")
        log(f"wrote the per-pixel mean of the {len(train)} training images to {mean_path}")
        if not kv:  # kRecordInput reads its mean_file with the data's backend
            written.append(mean_path)
            mean_path = out_dir / "mean_lmdb"
            self._write_mean(mean, shape, mean_path, "lmdb")
            log(f"wrote the same mean as an LMDB database to {mean_path}")
        labels_path = out_dir / "labels.txt"
        atomic_write_bytes(labels_path, "".join(f"{c}\n" for c in classes).encode(), "labels")
        log(f"wrote {len(classes)} class names to {labels_path}")
        conf_path = out_dir / "job.conf"
        text = example_job_conf(
            out_dir, train_path, test_path, mean_path, shape, len(classes), len(held),
            opts.encoded, opts.backend, n_train=len(train),
        )  # fmt: skip
        atomic_write_bytes(conf_path, text.encode(), "job.conf")
        log(f"wrote an example job.conf to {conf_path}")
        written += [mean_path, labels_path, conf_path]
        return written

    @staticmethod
    def _warn_empty_classes(items, classes, root: Path, log, most: int = 10) -> None:
        """One warning line per class without images (the first ``most``; then one line
        counting the rest): it keeps its number and output, but nothing teaches it."""
        counts = np.bincount([label for _, label in items], minlength=len(classes))
        empty = np.flatnonzero(counts == 0)
        listed = (root / LISTFILE).is_file()
        for label in empty[:most]:
            source = (
                f"{root / LISTFILE} lists no image of it"
                if listed
                else f"its folder {root / classes[label]} holds no image files"
            )
            log(
                f"warning: class {label} ('{classes[label]}') is empty: {source}; it keeps "
                "its number and output, but no record teaches it"
            )
        if len(empty) > most:
            log(
                f"warning: {len(empty) - most} more classes are empty (of {len(classes)}; "
                f"the last is class {empty[-1]})"
            )

    @staticmethod
    def _write(path, indices, items, decoded, root, shape, pixel_sum, backend, log):
        store = get_host().get("store", backend)()
        store.open(str(path), KCREATE)
        try:
            for n, i in enumerate(indices):
                payload, chw = decoded[i]
                p, label = items[i]
                try:
                    rel = p.relative_to(root).as_posix()
                except ValueError:
                    rel = p.as_posix()
                rec = common_pb2.RecordProto(shape=list(shape), label=label, pixel=payload)
                store.write(f"{n:08d}_{rel}".encode(), rec.SerializeToString())
                if pixel_sum is not None:
                    pixel_sum += chw.reshape(-1)
        except BaseException:
            store.abort()
            raise
        store.close()
        log(f"wrote {len(indices)} records to {path}")

    @staticmethod
    def _write_mean(mean, shape, path, backend) -> None:
        store = get_host().get("store", backend)()
        store.open(str(path), KCREATE)
        try:
            rec = common_pb2.RecordProto(shape=list(shape), data=mean.tolist())
            store.write(b"mean", rec.SerializeToString())
        except BaseException:
            store.abort()
            raise
        store.close()


def held_out_batching(held: int, most: int = 100) -> tuple[int, int]:
    """(batchsize, steps) of a test pass that reads the ``held`` test records once: a
    batchsize of at most ``most`` dividing ``held`` when one of at least half of it does, else
    the smallest even split (the last batch then wraps round to at most steps-1 records)."""
    steps = max(math.ceil(held / most), 1)
    for b in range(min(most, held), max(most // 2, 1) - 1, -1):
        if held % b == 0:
            return b, held // b
    return math.ceil(held / steps), steps


def pooling_fits(h: int, w: int) -> list[bool]:
    """Which of the example net's three 3x3 stride-2 poolings fit (the convolutions keep
    the size: 5x5, pad 2): one is kept while its window fits the height and the width that
    reach it, ``(H - 3) // 2 + 1`` after it."""
    kept = []
    for _ in range(3):
        fits = h >= 3 and w >= 3
        kept.append(fits)
        if fits:
            h, w = (h - 3) // 2 + 1, (w - 3) // 2 + 1
    return kept


def example_job_conf(
    out_dir, train_path, test_path, mean_path, shape, classes, held, encoded, backend,
    *, n_train: int | None = None,
) -> str:  # fmt: skip
    """The CIFAR-10 example's net (examples/cifar10/job.conf) for these stores, sized to
    them: the test pass reads the ``held`` test images once (:func:`held_out_batching`), and a
    comment says how many epochs of the ``n_train`` training images train_steps is."""
    c, h, w = shape
    batch = 100
    train_steps = 1000
    test_batch, test_steps = held_out_batching(held, batch) if test_path else (batch, 0)

    def data(path, phase, batch=batch):
        enc = "\n      encoded: true" if encoded else ""
        return f"""  layer {{
    name: "data"
    type: kRecordInput
    store_conf {{
      backend: "{backend}"
      path: "{path}"
      mean_file: "{mean_path}"
      batchsize: {batch}
      shape: {c}
      shape: {h}
      shape: {w}{enc}
    }}
    include: {phase}
  }}
"""

    def conv(name, src, filters, std, lr2=True):
        scale = " lr_scale: 2.0" if lr2 else ""
        b = f'\n    param {{ name: "b{name[-1]}"{scale} init {{ type: kConstant value: 0 }} }}'
        return f"""  layer {{
    name: "{name}"
    type: kCConvolution
    srclayers: "{src}"
    convolution_conf {{ num_filters: {filters} kernel: 5 stride: 1 pad: 2 }}
    param {{ name: "w{name[-1]}" init {{ type: kGaussian std: {std} }} }}{b}
  }}
"""

    def layer(name, kind, src, extra=""):
        extra = f"\n    {extra}" if extra else ""
        return f'  layer {{ name: "{name}" type: {kind} srclayers: "{src}"{extra} }}\n'

    pool = "pooling_conf {{ pool: {} kernel: 3 stride: 2 }}"
    lrn = "lrn_conf { local_size: 3 alpha: 5e-05 beta: 0.75 }"
    # the three 3x3 stride-2 poolings need images of at least 15x15 (32 -> 15 -> 7 -> 3);
    # a pooling whose window does not fit what reaches it is left out (its consumer reads
    # its source), so images of any size get a net that trains
    kept = pooling_fits(h, w)
    left_out = [f"pool{i + 1}" for i, k in enumerate(kept) if not k]

    def pooled(i, src, kind):
        name = f"pool{i + 1}"
        if not kept[i]:
            return "", src
        return layer(name, "kCPooling", src, pool.format(kind)), name

    pool1, after1 = pooled(0, "conv1", "MAX")
    pool2, after2 = pooled(1, "relu2", "AVG")
    pool3, after3 = pooled(2, "relu3", "AVG")
    net = (
        data(train_path, "kTrain")
        + (data(test_path, "kTest", test_batch) if test_path else "")
        + conv("conv1", "data", 32, 0.0001)
        + pool1
        + layer("relu1", "kReLU", after1)
        + layer("norm1", "kLRN", "relu1", lrn)
        + conv("conv2", "norm1", 32, 0.01)
        + layer("relu2", "kReLU", "conv2")
        + pool2
        + layer("norm2", "kLRN", after2, lrn)
        + conv("conv3", "norm2", 64, 0.01, lr2=False)
        + layer("relu3", "kReLU", "conv3")
        + pool3
        + f"""  layer {{
    name: "ip1"
    type: kInnerProduct
    srclayers: "{after3}"
    innerproduct_conf {{ num_output: {classes} }}
    param {{ name: "w4" wd_scale: 250 init {{ type: kGaussian std: 0.01 }} }}
    param {{ name: "b4" lr_scale: 2.0 wd_scale: 0 init {{ type: kConstant value: 0 }} }}
  }}
  layer {{
    name: "loss"
    type: kSoftmaxLoss
    softmaxloss_conf {{ topk: 1 }}
    srclayers: "ip1"
    srclayers: "data"
  }}
"""
    )
    test = f"test_steps: {test_steps}\ntest_freq: 200\n" if test_path else ""
    sizes = []
    if n_train:
        sizes.append(
            f"# train_steps {train_steps} x batchsize {batch} = "
            f"{train_steps * batch / n_train:.1f} epochs of the {n_train} training images"
        )
    if test_path:
        read = test_batch * test_steps
        again = f" ({read - held} of them read twice)" if read > held else ""
        sizes.append(
            f"# test_steps {test_steps} x batchsize {test_batch}: each test pass reads the {held} "
            f"held-out images once{again}"
        )
    if left_out:
        sizes.append(
            f"# {', '.join(left_out)} of the CIFAR-10 net left out: their 3x3 windows do not "
            f"fit what reaches them from {h}x{w} images (all three fit from 15x15 up)"
        )
    sized = "".join(line + "\n" for line in sizes)
    return f"""# Written by `singa data images`: SINGA 0.3's CIFAR-10 net
# (examples/cifar10/job.conf) for {c}x{h}x{w} images of {classes} classes. Train with
#   singa train {Path(out_dir) / "job.conf"}
# (labels.txt names the classes: line i is class i).
{sized}name: "images-convnet"
train_steps: {train_steps}
{test}disp_freq: 50
train_one_batch {{ alg: kBP }}
updater {{
  type: kSGD
  weight_decay: 0.004
  momentum: 0.9
  learning_rate {{ type: kFixed base_lr: 0.001 }}
}}
neuralnet {{
{net}}}
cluster {{ workspace: "{Path(out_dir) / "workspace"}" }}
"""
