"""Pipes between the actors of one node: the small messages of the same-node fast path.

A Ray actor call costs about half a millisecond of CPU on each side (submission,
serialisation, the reply's object); the MNIST MLP makes a dozen a step. Between actors of one
node the gradient and the value already live in shared memory
(:mod:`~singa_builtins.engines.ray.segments`), so what is left to say fits in a few integers,
and a pipe says it in microseconds:

* every process owns one **request pipe**: a worker of the node writes
  ``(server group, server, group, worker index, slice, step, n, flags)`` when it has left a
  gradient slice in its gradient segment, for the slice's server or, when the server is on
  another node, for the node's gateway of its group (see
  :mod:`~singa_builtins.engines.ray.gateway`); the actor's event loop reads the pipe;
* a server syncing with the master copy of a slice held by a process of the same node
  (distributed Hogwild) writes ``SYNC_REQUEST`` on that process's request pipe and gets
  ``SYNC_ANSWER`` on its own (see :meth:`SingaProcess._sync`);
* a worker owns one **reply pipe**: a server writes ``(slice, version)`` when the update the
  worker contributed to is applied.

The pipes are anonymous (``os.pipe``): another process of the node opens one through
``/proc/<pid>/fd/<n>`` of its owner, so nothing is ever created in a file system and nothing
can be left behind when a process is killed. Records are smaller than ``PIPE_BUF``, so the
writes of several workers never interleave.
"""

from __future__ import annotations

import os
import select
import struct

import numpy as np

REQUEST = struct.Struct("<8q")
REPLY = struct.Struct("<2q")
# REQUEST flags (for a gateway; a server ignores them)
FLUSH = 1  # send what is ready now: the writer has pushed its step or is about to wait
REGISTER = 2  # before the start: this worker will contribute n to the slice every update
# between the server groups of one node (distributed Hogwild), the delta and the master's
# value in the requester's sync segment: (master sg, server, requester's sg, requester's
# process, slice, 0, 0, SYNC_REQUEST) to the master's process, and back to the requester's
# (its sg, server, master sg, master's process, slice, 0, 0, SYNC_ANSWER)
SYNC_REQUEST = 4
SYNC_ANSWER = 8


class Pipe:
    """One anonymous pipe owned by this process: its read end and its address."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.pending = b""

    def address(self) -> tuple[int, int]:
        """(pid, fd) another process of the node opens to write into this pipe."""
        return os.getpid(), self.write_fd

    def read_records(self, record: struct.Struct) -> list[tuple]:
        """Every whole record available now (never blocks)."""
        chunks = [self.pending]
        while True:
            try:
                data = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        data = b"".join(chunks)
        whole = len(data) - len(data) % record.size
        self.pending = data[whole:]
        return list(record.iter_unpack(data[:whole]))

    def wait(self, timeout: float) -> bool:
        """Whether something can be read within ``timeout`` seconds."""
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        return bool(ready)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class Writers:
    """Write ends of other processes' pipes, opened once by address."""

    def __init__(self) -> None:
        self.fds: dict[tuple[int, int], int] = {}

    def open(self, address) -> int:
        address = tuple(address)
        fd = self.fds.get(address)
        if fd is None:
            pid, n = address
            if pid == os.getpid():
                fd = n
            else:
                fd = self.fds[address] = os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY)
        return fd

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def send(fd: int, record: struct.Struct, *values: int) -> None:
    os.write(fd, record.pack(*values))


# -- small batches between nodes: inline pieces ------------------------------------------------
# Ray carries an argument or a return value of up to 100 KiB inside the call's own message;
# a bigger one goes through the object stores (created, sealed, pulled by the other node's
# raylet, mapped). For a batch of small gradient slices (the CIFAR-10 net's are 10-200 KB)
# the store round trips cost more than the bytes, so a batch of at most SMALL_BATCH bytes
# travels as pieces of at most PIECE_BYTES, each its own argument and its own return value.
PIECE_BYTES = 96_000
SMALL_BATCH = 4 << 20
# a worker sends its queued slices for one server actor once they hold this many bytes
BATCH_BYTES = 1 << 20


class PushCall:
    """A ``push_many`` or ``push_pieces`` call to the server actor ``peer`` for ``items``
    (``(sg, j, group, worker, slice, step, n, grad)`` each): a batch of at most
    ``SMALL_BATCH`` bytes goes as inline pieces. ``refs`` are the call's return values;
    :meth:`answers` turns what they hold into ``[(version, value), ...]``, one per item.
    (Ray serialises the gradients when the call is made: the buffers may change after.)"""

    def __init__(self, peer, items: list) -> None:
        grads = [item[-1] for item in items]
        self.pieces = sum(g.nbytes for g in grads) <= SMALL_BATCH
        if not self.pieces:
            self.refs = [peer.push_many.remote(items)]
            return
        self.sizes = [g.size for g in grads]
        plan = plan_pieces(self.sizes)
        pieces = [[(i, a, grads[i][a:b]) for i, a, b in piece] for piece in plan]
        refs = peer.push_pieces.options(num_returns=len(plan)).remote(
            [item[:-1] for item in items], *pieces
        )
        self.refs = list(refs) if len(plan) > 1 else [refs]

    def answers(self, parts: list) -> list:
        """``[(version, value), ...]`` from the values of ``refs``."""
        if not self.pieces:
            return parts[0]
        values = [np.empty(n, dtype=np.float32) for n in self.sizes]
        versions = [0] * len(self.sizes)
        for part in parts:
            for item, version, start, value in part:
                versions[item] = version
                values[item][start : start + len(value)] = value
        return list(zip(versions, values, strict=True))


def plan_pieces(sizes: list[int], limit: int = PIECE_BYTES // 4) -> list[list[tuple]]:
    """Cut items of ``sizes`` float32 values into pieces of at most ``limit`` values:
    ``[[(item, start, stop), ...], ...]``, the same plan on both sides of a call."""
    pieces: list[list[tuple]] = [[]]
    room = limit
    for item, size in enumerate(sizes):
        start = 0
        while start < size or (size == 0 and start == 0):
            if room == 0:
                pieces.append([])
                room = limit
            stop = min(size, start + room)
            pieces[-1].append((item, start, stop))
            room -= stop - start
            if size == 0:
                break
            start = stop
    return pieces
