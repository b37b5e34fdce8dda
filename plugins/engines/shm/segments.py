"""The shared-memory segments of one job, named ``singa-<launcher pid>-<token>-<what>``.

Per server group ``sg``: ``v<sg>`` the values of every slice (float32, flat layout), ``n<sg>``
the version of every slice (int64), ``s<sg>`` the updater state arrays (one flat block per
state name), ``y<sg>`` the inter-group sync buffer (only with several server groups). Per
worker ``w``: ``g<w>`` its gradient buffer. Per bridge pair ``k``: ``bd<k>`` / ``bg<k>`` its
data and gradient. The launcher creates (and is the only one to unlink) them; the spawned
processes attach by name.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from singa_core.errors import SingaError

_DTYPES = {"f4": np.float32, "i8": np.int64}


def new_prefix() -> str:
    return f"singa-{os.getpid()}-{secrets.token_hex(3)}-"


@dataclass
class SegmentSpec:
    prefix: str
    sizes: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (dtype, count)

    def add(self, key: str, dtype: str, count: int) -> None:
        self.sizes[key] = (dtype, int(count))

    def nbytes(self) -> int:
        return sum(count * np.dtype(_DTYPES[dt]).itemsize for dt, count in self.sizes.values())


SHM_DIR = "/dev/shm"


def shm_free() -> int | None:
    """Free bytes in ``/dev/shm``, where shared memory segments live (None without one)."""
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        return None


def check_room(need: int, free: int | None, where: str) -> None:
    """A clear error before any segment is touched when ``/dev/shm`` has less room than the
    job will touch there: a page that cannot be had is a SIGBUS that kills the process
    touching it (Docker gives containers 64 MB by default)."""
    if free is None or need <= free:
        return
    raise SingaError(
        f"the job needs {need / 2**20:.0f} MiB of shared memory on {where}; "
        f"{SHM_DIR} has {free / 2**20:.0f} MiB free there",
        where=SHM_DIR,
        help="give /dev/shm more room (Docker: `docker run --shm-size=2g ...`; Kubernetes: "
        "an emptyDir volume with `medium: Memory` mounted at /dev/shm), or place fewer "
        "worker and server processes there",
    )


class Segments:
    """Open segments (created or attached) as numpy arrays by key."""

    def __init__(self, spec: SegmentSpec, *, create: bool) -> None:
        self.spec = spec
        self.owner = create
        self._shm: dict[str, shared_memory.SharedMemory] = {}
        self.arrays: dict[str, np.ndarray] = {}
        try:
            for key, (dt, count) in spec.sizes.items():
                dtype = np.dtype(_DTYPES[dt])
                nbytes = max(1, count * dtype.itemsize)
                name = spec.prefix + key
                shm = (
                    shared_memory.SharedMemory(name=name, create=True, size=nbytes)
                    if create
                    else shared_memory.SharedMemory(name=name)
                )
                self._shm[key] = shm
                arr = np.ndarray((count,), dtype=dtype, buffer=shm.buf)
                if create:
                    arr[...] = 0
                self.arrays[key] = arr
        except BaseException:
            self.close()
            raise

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        """Drop the arrays and close (the creator also unlinks) every segment."""
        self.arrays.clear()
        for shm in self._shm.values():
            try:
                shm.close()
            except BufferError:  # a view is still alive somewhere; the mapping goes at exit
                pass
            if self.owner:
                try:
                    shm.unlink()
                except FileNotFoundError:
                    pass
        self._shm.clear()


def leftover_segments(prefix: str) -> list[str]:
    """Names under /dev/shm starting with ``prefix`` (for cleanup checks)."""
    d = Path("/dev/shm")
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix))
