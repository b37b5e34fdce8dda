"""Shared memory between the actors of one node (the Ray engine's same-node fast path).

Ray's object store costs a copy in and page faults per object (on these machines about
0.6 GB/s for a 48 MB gradient through an actor call), while the shm engine moves the same
bytes at memcpy speed. So actors on one node share Param values and gradients the way the
shm engine's processes do, and Ray carries only the small messages:

* a process with servers keeps, per server group it serves, the values of its slices in a
  segment ``v<sg>`` laid out like the whole server group (float32, ``layout.total``; only the
  pages of its own slices are ever touched, so the rest costs no memory): its servers update
  them in place, and the workers of its node read them there;
* a process with workers keeps, per worker, a gradient segment ``g<worker index>`` of the same
  layout: the worker copies a gradient slice there and tells the slice's server (on the same
  node) which slice is ready; the server sums from, and may scribble on, that buffer.

Every segment is created by its owner when the actor starts and attached by the other
actors of the same node (the same Ray node id: two Ray nodes on one machine do not share);
then the driver has each owner unlink its names, so nothing stays in ``/dev/shm`` whatever
happens later: the memory goes when the last process mapping it exits, killed or not. A
process killed before the unlink leaves its names to its multiprocessing resource tracker,
which removes them.
"""

from __future__ import annotations

import secrets
from multiprocessing import resource_tracker, shared_memory

import numpy as np


class NodeSegments:
    """The segments one actor created (by key) and the ones it attached (by name)."""

    def __init__(self, index: int) -> None:
        self.prefix = f"singa-ray-{secrets.token_hex(4)}-p{index}-"
        self.created: dict[str, shared_memory.SharedMemory] = {}
        self.attached: dict[str, shared_memory.SharedMemory] = {}
        self.arrays: dict[str, np.ndarray] = {}

    def create(self, key: str, count: int) -> np.ndarray:
        """A new zero-filled float32 segment of ``count`` values, kept under ``key``."""
        shm = shared_memory.SharedMemory(
            name=self.prefix + key, create=True, size=max(4, 4 * int(count))
        )
        self.created[key] = shm
        arr = np.ndarray((int(count),), dtype=np.float32, buffer=shm.buf)
        self.arrays[key] = arr
        return arr

    def names(self) -> dict[str, str]:
        """key -> name of every created segment (for the other actors of the node)."""
        return {key: shm.name for key, shm in self.created.items()}

    def attach(self, name: str, count: int) -> np.ndarray:
        """Another actor's segment, as a float32 array of ``count`` values."""
        shm = self.attached.get(name)
        if shm is None:
            shm = shared_memory.SharedMemory(name=name)
            # Python < 3.13 registers an attached segment with this process's resource
            # tracker, which would unlink it (the owner's!) when this process exits
            resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
            self.attached[name] = shm
        return np.ndarray((int(count),), dtype=np.float32, buffer=shm.buf)

    def unlink(self) -> None:
        """Remove the names of the created segments (the mappings stay valid)."""
        for shm in self.created.values():
            try:
                shm.unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.arrays.clear()
        for shm in [*self.created.values(), *self.attached.values()]:
            try:
                shm.close()
            except BufferError:  # a view is still alive; the mapping goes with the process
                pass
        self.unlink()
