"""Locating (or downloading) a dataset's raw files for ``singa data NAME``.

Where the raw files are looked for, in order: ``--from DIR``; ``$SINGA_DATA/<subdir>``;
the download cache ``$SINGA_CACHE`` (default ``~/.cache/singa``)/<subdir>, filled by
downloading each file and checking its SHA-256. If none works the error says exactly which
files to put where.
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import AtomicFile


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _missing(folder: Path, files) -> list[str]:
    return [name for name in files if not (folder / name).is_file()]


def _download(url: str, dest: Path, sha256: str, size: int) -> None:
    """Download ``url`` to ``dest`` atomically, checking its SHA-256 before it appears."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    out = AtomicFile(str(dest), "download")
    h = hashlib.sha256()
    got = 0
    live = sys.stderr.isatty()
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            while chunk := resp.read(1 << 16):
                out.write(chunk)
                h.update(chunk)
                got += len(chunk)
                if live:
                    pct = 100 * got / size if size else 0
                    sys.stderr.write(f"\r{dest.name}: {got / 1e6:6.1f} MB {pct:5.1f}%\x1b[K")
        if live:
            sys.stderr.write("\n")
        if h.hexdigest() != sha256:
            raise SingaError(
                f"downloaded {dest.name} has the wrong checksum "
                f"(sha256 {h.hexdigest()}, expected {sha256})",
                where=url,
                help="try again later, or download the file yourself and use --from DIR",
            )
        out.commit()
    except BaseException:
        out.abort()
        raise


def find_raw_files(conv, source: Path | None) -> Path:
    files = conv.files
    if source is not None:
        missing = _missing(source, files)
        if missing:
            raise SingaError(
                f"{source} lacks {', '.join(missing)}",
                where=str(source),
                help=f"--from must name the folder holding: {', '.join(files)}",
            )
        return source
    tried = []
    env = os.environ.get("SINGA_DATA")
    if env:
        folder = Path(env) / conv.env_subdir
        if not _missing(folder, files):
            return folder
        tried.append(
            f"$SINGA_DATA/{conv.env_subdir} = {folder}: missing "
            f"{', '.join(_missing(folder, files))}"
        )
    cache = Path(os.environ.get("SINGA_CACHE", Path.home() / ".cache" / "singa")) / conv.env_subdir
    missing = _missing(cache, files)
    errors = []
    for name in missing:
        sha, size, url = files[name]
        if not url:
            errors.append(f"{name}: no download address known ({conv.description})")
            continue
        try:
            print(f"downloading {url}", file=sys.stderr)
            _download(url, cache / name, sha, size)
        except SingaError:
            raise
        except Exception as exc:  # network errors of every kind
            errors.append(f"{name}: {exc}")
    if not errors:
        return cache
    looked = [str(Path(env) / conv.env_subdir)] if env else []
    looked.append(str(cache))
    raise SingaError(
        f"cannot find the raw {conv.name} files: looked in {' and '.join(looked)}"
        + ("" if env else " ($SINGA_DATA is not set)"),
        where=looked[0],
        notes=tried + [f"download into {cache} failed: {e}" for e in errors],
        help=(
            f"put {', '.join(files)} into a folder and run `singa data {conv.name} --from "
            f"FOLDER --out ...`, or set SINGA_DATA to a folder with a '{conv.env_subdir}' "
            "subfolder holding them"
        ),
    )


def prepare_dataset(conv, out: Path, source: Path | None, log=None) -> list[Path]:
    """Convert ``conv``'s raw files (from ``source``, $SINGA_DATA or a download) into stores
    in ``out``; returns the files written. ``log(message)`` gets the converter's progress
    (default: printed to stderr)."""
    from singa_core.running.paths import writable_folder_problem

    problem = writable_folder_problem(str(out), what="it")  # before any download
    if problem is not None and not problem.endswith("not writable"):  # that: writable_folder
        raise SingaError(
            f"cannot write into the output folder {out}: {problem}",
            where="--out",
            help="give --out a folder you can write to (it is created if missing), with "
            "names of at most 255 bytes",
        )
    folder = find_raw_files(conv, source)
    for name, (sha, size, _url) in conv.files.items():
        found = (folder / name).stat().st_size
        if size and found != size:
            raise SingaError(
                f"{name} has {found} bytes, expected {size}",
                where=str(folder / name),
                help="the file is truncated or a different file; replace it",
            )
        if sha and sha256_of(folder / name) != sha:
            raise SingaError(
                f"{name} does not match its published checksum",
                where=str(folder / name),
                help="the file is damaged or a different version; replace it",
            )
    writable_folder(out)
    return conv.convert(folder, out, log or (lambda msg: print(msg, file=sys.stderr)))


def writable_folder(out: Path) -> None:
    """Create the folder ``out`` if needed and check that a file can be made in it (a
    read-only filesystem refuses even root), before any conversion work: a SingaError
    naming the folder otherwise."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".singa-probe.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if out.exists() and not out.is_dir():
            reason = "it is not a folder"
        raise SingaError(
            f"cannot write into the output folder {out}: {reason}",
            where="--out",
            help="give --out a folder you can write to (a read-only filesystem or a "
            "folder without write permission cannot hold the stores)",
        ) from None
