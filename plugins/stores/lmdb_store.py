"""lmdb: (key, value) tuples in an LMDB environment (SINGA 0.3's "lmdb" backend, USE_LMDB).

The store a Caffe user already has: ``convert_imageset`` and ``convert_mnist_data`` write an
LMDB folder (``data.mdb`` + ``lock.mdb``) of serialized Datums. Needs the optional
``lmdb`` package (``pip install 'singa-classic[lmdb]'``).

* kRead opens the environment read-only without a lock file (so a read-only copy works);
  ``path`` is the folder, or a single database file written with ``subdir=False``. Tuples are
  read in key order (LMDB keeps keys sorted), ``position()`` is the index of the next
  tuple and ``seek(i)`` goes to tuple ``i`` (walking the cursor; a resumed job does it once).
* kCreate writes a new environment into a temp folder next to ``path`` that ``close()``
  renames into place (the folder at ``path`` is the old or the new database, never a
  partial one); kAppend copies the existing tuples into such a temp folder first. As with
  kvfile, ``write`` refuses (returns False for) an empty value or a key already present.
* a full disk is a SingaError naming the free space, and the temp folder is removed: before
  each write transaction is committed (the moment ``data.mdb`` grows) and before the map
  grows, the pages the transaction may add are compared with what ``os.statvfs`` says is
  free (with writemap off LMDB writes with pwrite, but reads the new pages back through its
  map: a page a full disk refused would be a SIGBUS); a failed commit or sync is the same
  error;
* a damaged environment or page is a SingaError naming the folder and the last key read;
  a truncated ``data.mdb`` (shorter than its own header says) is refused before it is
  mapped (``_lmdb_header.py``), where reading its missing pages would be a SIGBUS.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import warnings

from singa_core.errors import SingaError, SingaWarning
from singa_core.running.fileio import fsync_dir
from singa_core.store import KAPPEND, KCREATE, KREAD, Store

from ._files import as_bytes
from ._lmdb_header import check_data_file

_DAMAGED_HELP = (
    "the LMDB database is damaged, incomplete or not an LMDB environment; re-create it "
    "(e.g. with Caffe's convert_imageset, or `singa data images DIR --out OUT --backend lmdb`)"
)
_BATCH = 1000  # puts per write transaction
_FULL_HELP = (
    "free space on that disk, or write the database to a larger one (nothing was left "
    "behind: the unfinished database was removed)"
)
_META_BYTES = 4 * 4096  # a new environment's meta pages and first leaf


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


_MAP0 = 1 << 26  # initial map size of a new database; doubled whenever full


# LMDB allows an environment to be opened once per process: readers of the same database
# (a train and a test layer, a layer and a mean file) share it, each with its own transaction
_READERS: dict[str, list] = {}  # real path -> [environment, number of open stores]
_READERS_LOCK = threading.Lock()


def _open_shared(lmdb, path: str, subdir: bool):
    key = os.path.realpath(path)
    with _READERS_LOCK:
        entry = _READERS.get(key)
        if entry is None:
            env = lmdb.open(
                path, subdir=subdir, readonly=True, lock=False, readahead=False, max_dbs=0
            )
            entry = _READERS[key] = [env, 0]
        entry[1] += 1
        return entry[0], key


def _close_shared(key: str) -> None:
    with _READERS_LOCK:
        entry = _READERS.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _READERS[key]
            entry[0].close()


def lmdb_module():
    try:
        import lmdb
    except ImportError:
        raise SingaError(
            "the lmdb store needs the lmdb package, which is not installed",
            help="pip install 'singa-classic[lmdb]'",
        ) from None
    return lmdb


class LMDBStore(Store):
    """Sequential access to an LMDB environment's main database."""

    type_names = ("lmdb",)

    def __init__(self) -> None:
        self.path: str | None = None
        self._mode: int | None = None
        self._env = None
        self._txn = None
        self._cursor = None
        self._index = 0
        self._started = False  # the cursor has been positioned (first read done)
        self._last_key: bytes | None = None
        self._tmp: str | None = None
        self._staged: list[tuple[bytes, bytes]] = []  # puts of the open write transaction
        self._psize = 4096  # the environment's page size (read when it is opened)
        self._shared: str | None = None  # the key of a shared reading environment

    # ------------------------------------------------------------------ opening
    def open(self, path: str, mode: int) -> None:
        self.close()
        lmdb = lmdb_module()
        path = os.fspath(path)
        self.path = path
        if mode == KREAD:
            self._open_read(lmdb, path)
        elif mode in (KCREATE, KAPPEND):
            self._open_write(lmdb, path, mode)
        else:
            raise ValueError(f"unknown store mode {mode!r}")
        self._mode = mode

    def _damaged(self, exc, what: str) -> SingaError:
        where = self.path
        if self._last_key is not None:
            where = f"{self.path}, after key '{self._last_key.decode('utf-8', 'replace')}'"
        return SingaError(f"{what}: {exc}", where=where, help=_DAMAGED_HELP)

    def _open_read(self, lmdb, path: str) -> None:
        if not os.path.exists(path):
            raise SingaError(
                f"cannot open LMDB database {path}: no such folder",
                help="check the path; an LMDB database is a folder holding data.mdb",
            )
        subdir = os.path.isdir(path)
        if subdir and not os.path.isfile(os.path.join(path, "data.mdb")):
            raise SingaError(
                f"cannot open LMDB database {path}: the folder has no data.mdb",
                help="name the folder Caffe's convert_imageset wrote (it holds data.mdb)",
            )
        # a truncated data file would be a SIGBUS once mapped: its size is checked first
        check_data_file(os.path.join(path, "data.mdb") if subdir else path)
        warnings.warn(
            f"{path}: LMDB records carry no checksum (Caffe's format): the database's size "
            "and header are checked, but damage inside a record is not detected",
            SingaWarning,
            stacklevel=2,
        )
        try:
            self._env, self._shared = _open_shared(lmdb, path, subdir)
            self._txn = self._env.begin(buffers=False)
            self._cursor = self._txn.cursor()
        except lmdb.Error as exc:
            self._release()
            raise self._damaged(exc, f"cannot open LMDB database {path}") from None

    def _open_write(self, lmdb, path: str, mode: int) -> None:
        if os.path.islink(path) and os.path.isdir(path):
            # a link to a database folder: write through it (the link stays, its target
            # gets the new database), as singa's writers do for files
            path = os.path.realpath(path)
            self.path = path
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise SingaError(
                f"cannot create LMDB database {path}: folder {parent} does not exist",
                where=path,
                help=f"create the folder first (mkdir -p {parent})",
            )
        if os.path.lexists(path) and not os.path.isdir(path):
            raise SingaError(
                f"cannot create LMDB database {path}: something that is not a folder is "
                "there (a file, a device, a FIFO or a dangling link), which it would replace",
                where=path,
                help="an LMDB database is a folder: give a new path, or remove what is there",
            )
        if mode == KAPPEND and not os.path.isdir(path):
            raise SingaError(
                f"cannot open LMDB database {path} for appending: no such folder",
                where=path,
                help="open a new store with mode kCreate; kAppend adds to an existing one",
            )
        self._tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", dir=parent)
        try:
            self._check_room(_META_BYTES)  # the two meta pages and a first leaf
            try:
                self._env = lmdb.open(self._tmp, map_size=_MAP0, subdir=True, max_dbs=0)
            except lmdb.Error as exc:
                raise self._full(exc) from None
            self._psize = int(self._env.stat()["psize"])
            if mode == KAPPEND:
                old = LMDBStore()
                old.open(path, KREAD)
                try:
                    while (rec := old.read()) is not None:
                        self.write(*rec)
                finally:
                    old.close()
        except BaseException:
            self.abort()
            raise

    def _wrong_mode(self, action: str) -> SingaError:
        return SingaError(
            f"cannot {action} LMDB store {self.path}: it is not open in a mode that allows it",
            help="open it with kRead to read, with kCreate or kAppend to write",
        )

    # ------------------------------------------------------------------ reading
    def read(self) -> tuple[bytes, bytes] | None:
        if self._mode != KREAD:
            raise self._wrong_mode("read from")
        lmdb = lmdb_module()
        try:
            moved = self._cursor.next() if self._started else self._cursor.first()
            self._started = True
            if not moved:
                return None
            key, value = self._cursor.item()
        except lmdb.Error as exc:
            raise self._damaged(exc, f"damaged LMDB database {self.path}") from None
        self._index += 1
        self._last_key = key
        return key, value

    def seek_to_first(self) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("rewind")
        self._started = False
        self._index = 0
        self._last_key = None

    def position(self) -> int:
        return self._index

    def seek(self, position: int) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("seek in")
        position = int(position)
        if position < 0:
            raise SingaError(
                f"cannot seek to record {position} of LMDB store {self.path}",
                help="record positions start at 0",
            )
        if position < self._index:
            self.seek_to_first()
        while self._index < position:
            if self.read() is None:
                raise SingaError(
                    f"cannot seek to record {position} of LMDB store {self.path}: "
                    f"it has only {self._index} records",
                    help="the database is shorter than when the position was saved; resume "
                    "with the data the job was started with",
                )

    def count(self) -> int:
        if self._mode != KREAD:
            raise self._wrong_mode("count")
        return int(self._txn.stat()["entries"])

    # ------------------------------------------------------------------ writing
    def write(self, key, value) -> bool:
        if self._env is None or self._mode == KREAD or self._tmp is None:
            raise self._wrong_mode("write to")
        key, value = as_bytes(key, "keys"), as_bytes(value, "values")
        if not value or not key:
            return False
        lmdb = lmdb_module()
        while True:
            try:
                if self._txn is None:
                    self._txn = self._env.begin(write=True)
                ok = self._txn.put(key, value, overwrite=False)
                break
            except lmdb.MapFullError:
                self._txn.abort()
                self._txn = None
                self._replay_grow()
        if ok:
            self._staged.append((key, value))
            if len(self._staged) >= _BATCH:
                self.flush()
        return bool(ok)

    # ------------------------------------------------------------------ disk space
    def _free_bytes(self) -> int:
        st = os.statvfs(self._tmp)
        return int(st.f_bavail) * int(st.f_frsize)

    def _staged_bytes(self) -> int:
        """At most what committing the staged puts adds to ``data.mdb``: each value on
        overflow pages of its own, or in a leaf half full; the changed branch pages."""
        psize = self._psize
        total = 0
        for k, v in self._staged:
            node = 8 + len(k) + len(v)
            if node > psize // 2 - 64:  # LMDB moves a large value to overflow pages
                total += -(-(len(v) + 16) // psize) * psize + 2 * (16 + len(k))
            else:
                total += 2 * (node + 2)
        return total + total // 8 + 8 * psize

    def _check_room(self, need: int) -> None:
        free = self._free_bytes()
        if need > free:
            err = SingaError(
                f"no room for LMDB database {self.path}: the disk holding it has "
                f"{_size(free)} free, and the next {max(len(self._staged), 1)} record(s) "
                f"need up to {_size(need)}",
                where=self.path,
                help=_FULL_HELP,
            )
            self.abort()  # nothing left behind: the temp folder goes
            raise err

    def _full(self, exc) -> SingaError:
        """A write LMDB refused (ENOSPC, EIO, ...): the error naming the free space; the
        temp folder is removed."""
        err = SingaError(
            f"cannot write LMDB database {self.path}: {exc} (the disk holding it has "
            f"{_size(self._free_bytes())} free)",
            where=self.path,
            help=_FULL_HELP,
        )
        self.abort()
        return err

    def _replay_grow(self) -> None:
        """The map is full: double it and put the uncommitted tuples again."""
        self._check_room(self._staged_bytes())  # the file grows past the old map
        info = self._env.info()
        self._env.set_mapsize(int(info["map_size"]) * 2)
        self._txn = self._env.begin(write=True)
        for k, v in self._staged:
            self._txn.put(k, v, overwrite=False)

    def flush(self) -> None:
        if self._txn is not None and self._tmp is not None:
            lmdb = lmdb_module()
            try:
                self._check_room(self._staged_bytes())
                self._txn.commit()
            except lmdb.Error as exc:
                self._txn = None
                raise self._full(exc) from None
            except BaseException:
                if self._txn is not None:
                    self._txn.abort()
                    self._txn = None
                raise
            self._txn = None
            self._staged.clear()

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Finish: a writer's temp database is synced and renamed into place."""
        if self._tmp is not None and self._env is not None:
            try:
                self.flush()
                try:
                    self._env.sync(True)
                except lmdb_module().Error as exc:
                    raise self._full(exc) from None
                self._env.close()
                self._env = None
                self._publish()
            except BaseException:
                self.abort()
                raise
        self._release()

    def _publish(self) -> None:
        path, tmp = self.path, self._tmp
        trash = None
        if os.path.lexists(path):
            trash = tempfile.mkdtemp(
                prefix=f".{os.path.basename(path)}.old.", dir=os.path.dirname(os.path.abspath(path))
            )
            os.rmdir(trash)
            os.replace(path, trash)
        try:
            os.replace(tmp, path)
        except OSError:
            if trash is not None:
                os.replace(trash, path)
            raise
        self._tmp = None
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)

    def abort(self) -> None:
        """Discard what a writer wrote (the database at ``path`` is left as it was)."""
        if self._txn is not None and self._tmp is not None:
            try:
                self._txn.abort()
            except Exception:
                pass
            self._txn = None
        if self._env is not None and self._tmp is not None:
            self._env.close()
            self._env = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._release()

    def _release(self) -> None:
        self._cursor = None
        if self._txn is not None:
            try:
                self._txn.abort()
            except Exception:
                pass
        self._txn = None
        if self._shared is not None:
            _close_shared(self._shared)
            self._shared = None
        elif self._env is not None:
            self._env.close()
        self._env = None
        self._mode = None
        self._index = 0
        self._started = False
        self._last_key = None
        self._staged.clear()

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        if getattr(self, "_tmp", None) is not None:  # never publish an unclosed writer
            try:
                self.abort()
            except Exception:
                pass
