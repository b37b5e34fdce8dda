"""What a start-up deadline names: the processes that did not start, each with what it was
waiting for, and a firewall only where one can be the cause.

When ``--startup-timeout`` passes, the driver asks, for every process that has not answered
(and only those), the GCS's actor table for its actor (no dashboard needed) and, where Ray
has leased it a worker process, tries a TCP connection from this machine to that worker's
port. Each late process is then one of:

* waiting for Ray to start a worker process for it (no worker leased yet: a loaded node);
* its worker process started but does not answer from this machine (the connection to its
  port fails): *unreachable*, the one case where a firewall or a wrong
  ``--node-ip-address`` is named, and only for a node other than the driver's own;
* its worker process answers and is creating the actor, or the actor is up and had not
  finished the stage (attaching shared memory, building its net): slow, not cut off.

Before the actors, every node runs a start-up check task (:mod:`.nodecheck`); a node whose
check does not come back is named with whether its raylet answers a connection from this
machine, and counts as cut off only when it is another node and either its raylet does not
answer or this machine's own node answered (a task's worker port is not published by Ray:
that case is inferred, and said so).

The help line follows: a firewall for unreachable processes on other nodes; otherwise the
load of this machine and ``--startup-timeout``.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from singa_core.errors import SingaError

PROBE_TIMEOUT = 1.0  # seconds a connection to a late worker process may take


@dataclass(frozen=True)
class Late:
    """One process that had not answered when the deadline passed."""

    role: str  # e.g. "worker process 2 (group 1 workers 0-1)"; "" for a node's check
    node: str  # e.g. "10.77.0.2 (Ray node 0123456789ab)"
    driver_node: bool  # on the node this driver runs on
    waiting: str  # what it was waiting for
    unreachable: bool = False  # its worker process does not answer from this machine


def reachable(address: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def waiting_for(actor: dict | None, stage: str, probe=reachable) -> tuple[str, bool]:
    """(what a late process waits for, whether its worker is unreachable) from its row of
    the GCS actor table (None when the actor is unknown) and the driver's ``stage``."""
    if not actor:
        return "its actor is not known to Ray yet", False
    state = actor.get("State", "")
    addr = actor.get("Address") or {}
    ip, port = addr.get("IPAddress") or "", int(addr.get("Port") or 0)
    if state == "DEPENDENCIES_UNREADY":
        return "its actor waits for its arguments (the start values in Ray's object store)", False
    if state in ("PENDING_CREATION", "RESTARTING"):
        if not port:
            return "Ray has not started a worker process for it yet", False
        if not probe(ip, port):
            return (f"its worker process at {ip}:{port} does not answer from this machine"), True
        return f"its worker process at {ip}:{port} is creating the actor", False
    if state == "ALIVE":
        pid = actor.get("Pid") or "?"
        if port and not probe(ip, port):
            return (f"its actor (pid {pid}) is up but {ip}:{port} does not answer from this "
                    "machine"), True  # fmt: skip
        return f"its actor (pid {pid}) is up and had not finished {stage}", False
    if state == "DEAD":
        return f"its actor died ({actor.get('DeathCause') or 'no cause given'})".strip(), False
    return f"its actor is {state or 'in an unknown state'}", False


def check_waiting_for(row: dict | None, own_node: bool, own_answered: bool,
                      probe=reachable) -> tuple[str, bool]:  # fmt: skip
    """(what a node whose start-up check task did not come back waits for, whether it is
    cut off) from its row of ``ray.nodes()``. The task runs in a worker process whose port
    Ray does not publish; what can be told: whether the node's raylet answers a connection
    from this machine, and whether this machine's own node answered (when it did not
    either, the machine is slow, not cut off)."""
    if own_node:
        return "its start-up check had not come back (this machine's own node)", False
    ip, port = (row or {}).get("NodeManagerAddress"), int((row or {}).get("NodeManagerPort") or 0)
    if ip and port and not probe(ip, port):
        return f"its raylet at {ip}:{port} does not answer from this machine", True
    raylet = f"its raylet at {ip}:{port} answers, but " if ip and port else ""
    if own_answered:
        return (f"{raylet}the check task sent to a worker process there did not come back "
                "while this machine's own node answered"), True  # fmt: skip
    return f"{raylet}its start-up check had not come back (nor had this machine's)", False


def deadline_error(timeout: float, stage: str, late: list[Late], load=None) -> SingaError:
    """The located error of a start-up deadline passed with ``late`` not answering (a
    ``Late`` without a role is a node's start-up check)."""
    who = "; ".join(
        f"{x.role} on node {x.node}: {x.waiting}" if x.role else f"node {x.node}: {x.waiting}"
        for x in late
    )
    cut_off = [x for x in late if x.unreachable and not x.driver_node]
    if cut_off:
        nodes = ", ".join(dict.fromkeys(x.node for x in cut_off))
        help_ = (
            f"this machine cannot reach the worker processes Ray runs on {nodes}: a "
            "firewall there (every node's ports must be open both ways, the worker ports "
            "included) or an address given with --node-ip-address that this machine does not "
            "route; see docs/guide/clusters.md for the ports"
        )
    else:
        if load is None:
            try:
                load = os.getloadavg()[0]
            except OSError:
                load = None
        busy = f" (this machine's load: {load:.1f} on {os.cpu_count()} CPUs)" if load else ""
        help_ = (
            f"the processes named were slow to start{busy}, not cut off: a loaded machine, "
            "big data or nets, or different Python/Ray/singa-classic versions on a node "
            "(see /tmp/ray/session_latest/logs there); give them longer with "
            "--startup-timeout SECONDS"
        )
    return SingaError(
        f"start-up did not finish within the start-up deadline ({timeout:g} s, {stage}): {who}",
        where="--startup-timeout",
        help=help_,
    )


# -- a process that died while it was built ---------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def creation_error(exc: BaseException) -> str:
    """The error an actor's creation task raised, from the text of Ray's ``ActorDiedError``
    (its traceback ends with ``Type: message``, perhaps on several lines): the lines after
    the last frame; "" when it is not a creation task's error."""
    text = _ANSI.sub("", str(exc))
    if "creation task" not in text:
        return ""
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    last_frame = max((k for k, x in enumerate(lines) if x.startswith((" ", "\t"))), default=0)
    return "\n".join(lines[last_frame + 1 :])


def dead_pid(exc: BaseException) -> int:
    """The pid of a dead actor's worker process in Ray's error text (0 when not named)."""
    m = re.search(r"\bpid[:=] ?(\d+)", _ANSI.sub("", str(exc)))
    return int(m.group(1)) if m else 0


def worker_output(pid: int, lines: int = 12) -> str:
    """Run on a node: the last ``lines`` lines a worker process there (``pid``) wrote to its
    stderr (and stdout) log in Ray's session folder, Ray's own marker lines left out."""
    import glob

    try:
        from ray._private import worker as ray_worker

        node = ray_worker.global_worker.node
        logs = node.get_logs_dir_path() if node is not None else ""
    except Exception:  # noqa: BLE001 - Ray's default folder then
        logs = ""
    logs = logs or "/tmp/ray/session_latest/logs"
    out: list[str] = []
    for suffix in ("err", "out"):
        for path in sorted(glob.glob(os.path.join(logs, f"worker-*-{pid}.{suffix}"))):
            try:
                with open(path, errors="replace") as fh:
                    text = fh.read()[-20000:]
            except OSError:
                continue
            out += [x for x in text.splitlines() if x.strip() and not x.startswith(":")]
    return "\n".join(out[-lines:])
