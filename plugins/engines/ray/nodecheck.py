"""What the driver asks of every node before an attempt starts, and after it ends.

Before: one small task pinned to each node (no CPU asked) answers with the node's Python,
Ray and singa-classic versions, the free room in its ``/dev/shm``, and how many segments of
dead jobs it removed there (:func:`~singa_builtins.engines.ray.segments.unlink_dead`). A
node that does not answer within the start-up deadline, or whose versions differ from the
driver's, stops the job with a located message before any actor is made. After: the same
kind of task removes the attempt's segments on every node that still answers
(:func:`~singa_builtins.engines.ray.segments.unlink_attempt`), whatever the actors' fate.
"""

from __future__ import annotations

import platform
import time

from singa_builtins.engines.ray.segments import unlink_attempt, unlink_dead
from singa_builtins.engines.shm.segments import shm_free

from singa_core.errors import SingaError

CLEANUP_WAIT = 5.0  # seconds the driver waits for the nodes' clean-up tasks


def versions() -> dict[str, str]:
    """Python, Ray and singa-classic versions of this process."""
    import ray

    from singa_core import __version__ as singa_version

    return {
        "python": platform.python_version(),
        "ray": ray.__version__,
        "singa-classic": singa_version,
    }


def node_facts(node_id: str) -> dict:
    """Run on a node: its versions, /dev/shm room, and the dead jobs' segments removed."""
    return {"versions": versions(), "shm_free": shm_free(), "removed": unlink_dead(node_id)}


def on_each_node(nodes, fn, args_of) -> dict:
    """Object ref -> node: ``fn(*args_of(node))`` as a task pinned to every node (no CPU
    asked, no retry)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    out = {}
    for n in nodes:
        pinned = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.id, soft=False))
        out[pinned.remote(*args_of(n))] = n
    return out


GONE_NAMES = ("TaskUnschedulableError", "NodeDiedError")
SUSPECT_WAIT = 10.0  # seconds a node that just lost a process gets to answer on a restart


def _gone(exc: BaseException) -> bool:
    """Whether a node's check failed because the node is gone (Ray may list a dead node as
    alive for a while: a task pinned there fails as unschedulable)."""
    import ray.exceptions as rex
    from singa_builtins.engines.ray.faults import is_loss

    kinds = tuple(getattr(rex, n) for n in GONE_NAMES if hasattr(rex, n))
    return isinstance(exc, kinds) or is_loss(exc)


def _late_error(nodes, late, timeout: float) -> SingaError:
    """The start-up deadline passed with the checks of ``late`` not back: each named with
    what can be told of it (:func:`~singa_builtins.engines.ray.startup.check_waiting_for`)."""
    import ray
    from singa_builtins.engines.ray.startup import Late, check_waiting_for, deadline_error

    try:
        own = ray.get_runtime_context().get_node_id()
        rows = {n["NodeID"]: n for n in ray.nodes()}
    except Exception:  # noqa: BLE001 - only details of the message
        own, rows = "", {}
    late_ids = {n.id for n in late}
    own_answered = bool(own) and own not in late_ids and any(n.id == own for n in nodes)
    out = []
    for n in late:
        waiting, cut = check_waiting_for(rows.get(n.id), n.id == own, own_answered)
        out.append(Late("", n.label(), n.id == own, waiting, cut))
    return deadline_error(timeout, "the nodes' start-up check", out)


def check_nodes(
    nodes, deadline: float, signals=None, on_signal=None, suspect=frozenset(), timeout=0.0
) -> tuple[dict[str, dict], list]:
    """(node id -> :func:`node_facts` of every node that answered, the nodes found gone).
    Every node must answer before ``deadline`` (``time.monotonic()``) with the driver's
    versions, else a located error; a node whose check fails because it is gone is left
    out, and so is a node of ``suspect`` (where the previous attempt lost a process) that
    does not answer within :data:`SUSPECT_WAIT` (scaled by this machine's slowdown,
    :mod:`.machine`). ``on_signal()`` is called while waiting
    when ``signals.caught`` is not empty."""
    import ray
    from singa_builtins.engines.ray.faults import summary

    refs = on_each_node(nodes, node_facts, lambda n: (n.id,))
    pending = list(refs)
    from singa_builtins.engines.ray.machine import scaled

    suspect_until = time.monotonic() + scaled(SUSPECT_WAIT, cap=30.0)  # a loaded machine
    gone = []
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
        if signals is not None and signals.caught and on_signal is not None:
            on_signal()
        if pending and time.monotonic() > suspect_until:
            for r in [r for r in pending if refs[r].id in suspect]:
                gone.append(refs.pop(r))
                pending.remove(r)
        if pending and time.monotonic() > deadline:
            raise _late_error(nodes, [refs[r] for r in pending], timeout)
    out, mine = {}, versions()
    for ref, node in refs.items():
        try:
            facts = ray.get(ref)
        except (ray.exceptions.RayError, OSError) as exc:
            if _gone(exc):
                gone.append(node)
                continue
            raise SingaError(
                f"the start-up check failed on node {node.label()}: {summary(exc)}",
                where="--address",
                help="every node needs the same Python, Ray and singa-classic as this "
                f"machine ({', '.join(f'{k} {v}' for k, v in mine.items())}); its logs are in "
                "/tmp/ray/session_latest/logs there",
            ) from None
        differ = {k: v for k, v in facts["versions"].items() if mine.get(k) != v}
        if differ:
            raise SingaError(
                f"node {node.label()} runs "
                + ", ".join(f"{k} {v}" for k, v in differ.items())
                + " but this machine runs "
                + ", ".join(f"{k} {mine[k]}" for k in differ),
                where="--address",
                help="install the same versions on every node (`pip install "
                f"'singa-classic[ray]=={mine['singa-classic']}' 'ray=={mine['ray']}'` in the "
                "same Python), then restart Ray there",
            )
        out[node.id] = facts
    return out, gone


def clean_attempt(nodes, attempt: str) -> int:
    """Remove the segments of ``attempt`` on every node that answers within
    :data:`CLEANUP_WAIT`; how many were removed."""
    import ray

    try:
        refs = list(on_each_node(nodes, unlink_attempt, lambda n: (attempt,)))
        from singa_builtins.engines.ray.machine import scaled

        done, _ = ray.wait(refs, num_returns=len(refs), timeout=scaled(CLEANUP_WAIT, cap=15.0))
    except Exception:  # noqa: BLE001 - the runtime itself is going
        return 0
    removed = 0
    for ref in done:
        try:
            removed += ray.get(ref)
        except Exception:  # noqa: BLE001 - that node is gone; its /dev/shm with it
            pass
    return removed
