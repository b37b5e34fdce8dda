"""A shm process's exit hands its queued messages on and frees the queues' write locks
(plugins/engines/shm/process.py: close_queues).

A multiprocessing Queue's ``put`` leaves the message to a daemon feeder thread, which holds
the queue's inter-process write lock while it writes. A process that exits straight after
its last put, without waiting for that thread, loses messages and can leave the lock held
for good: the next put to that queue in any process blocks, and a job hangs at its end.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import sys

from singa_builtins.engines.shm.process import close_queues

MESSAGES = 40


def _put_then_exit(queues, flush: bool) -> None:
    for i in range(MESSAGES):
        for q in queues:
            q.put(("update", i, b"x" * 300))
    close_queues(queues, flush)
    sys.exit(0)


def _drain(q) -> int:
    got = 0
    while True:
        try:
            q.get(timeout=0.5)
        except queue.Empty:
            return got
        got += 1


def test_a_finished_process_delivers_its_last_messages_and_frees_the_write_locks():
    ctx = mp.get_context("spawn")
    for _ in range(2):  # the exit races its feeder threads: a few rounds
        queues = [ctx.Queue() for _ in range(3)]
        p = ctx.Process(target=_put_then_exit, args=(queues, True))
        p.start()
        p.join(timeout=60)
        assert p.exitcode == 0
        for q in queues:
            free = q._wlock.acquire(timeout=2)
            assert free, "the exited process left the queue's write lock held"
            q._wlock.release()
            assert _drain(q) == MESSAGES
            q.put(("after",))  # and the queue still takes messages
            assert q.get(timeout=5) == ("after",)


def test_an_aborting_process_does_not_wait_for_a_lock_a_dead_peer_holds():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    q._wlock.acquire()  # as a peer killed mid-write leaves it
    p = ctx.Process(target=_put_then_exit, args=([q], False))
    p.start()
    p.join(timeout=30)
    assert p.exitcode == 0  # exited at once, its feeder stuck at the lock
