"""Whether this machine can be a driver of a Ray cluster, asked before ``ray.init``.

Ray lets a driver (``ray.init(address=...)``: ``singa train --address``, ``singa submit``)
join only from a machine that is one of the cluster's nodes, and only from the PID
namespace of that node's raylet (the raylet must see the driver's pid). Otherwise
``ray.init`` waits ~60 s and fails with a ``ConnectionError`` whose natural reading (ports,
firewalls) is wrong (measured, Ray 2.60). The GCS, which this machine already reached with
its token (:func:`~.auth.check_cluster`), lists the live nodes with their addresses, so the
two causes singa can see are said in one line each:

* no live node has the address this machine reaches the head from: this machine is not a
  node (``ray start --address HEAD`` first; ``jobs``, ``logs`` and ``stop`` need no node);
* a node has it, but no raylet runs in this process's PID namespace: a container that
  shares the node's network but not its processes.
"""

from __future__ import annotations

import socket
from pathlib import Path

from singa_core.errors import SingaError

ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE
TIMEOUT = 10.0


def source_address(host: str, port: int) -> str:
    """The address this machine sends from to reach ``host`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, port))
            return s.getsockname()[0]
        except OSError:
            return ""


def local_addresses() -> set[str]:
    """The IPv4 addresses of this machine's network interfaces (its network namespace)."""
    import fcntl
    import struct

    out = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                out.add(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24]))
            except OSError:  # SIOCGIFADDR: an interface without an IPv4 address
                continue
    return out


def raylet_here() -> bool:
    """Whether a raylet runs in this process's PID namespace (its /proc)."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "raylet":
                    return True
            except OSError:
                continue
    return False


def live_nodes(gcs_address: str) -> dict[str, int]:
    """Address -> node manager (raylet) port of the cluster's live nodes, as the GCS lists
    them."""
    from ray._raylet import GcsClient
    from singa_builtins.engines.ray.machine import scaled

    client = GcsClient(address=gcs_address)
    nodes = client.get_all_node_info(timeout=scaled(TIMEOUT, cap=60.0))
    return {n.node_manager_address: int(n.node_manager_port) for n in nodes.values()
            if n.state == ALIVE}  # fmt: skip


def live_node_addresses(gcs_address: str) -> list[str]:
    return sorted(live_nodes(gcs_address))


def listening(host: str, port: int) -> bool:
    """Whether something takes a TCP connection at ``host:port`` (from this machine)."""
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def driver_problem(
    address: str, gcs_address: str, nodes: list[str], mine: str, raylet_visible: bool,
    own: frozenset[str] | set[str] = frozenset(), raylet_answers: bool = True,
) -> SingaError | None:  # fmt: skip
    """The located error when this machine (sending from ``mine`` to the head, with the
    addresses ``own``) cannot be a driver of the cluster whose live nodes are at
    ``nodes``; None when it can. ``raylet_answers``: whether the raylet port of the node
    listed at this machine's address takes a connection here (no: the node Ray lists is a
    former one of this machine, from before it restarted, not yet found dead by the GCS)."""
    if set(nodes) & ({mine} | set(own)):
        if raylet_visible:
            return None
        if not raylet_answers:
            shown = mine or ", ".join(sorted(own)) or "?"
            return SingaError(
                f"this machine ({shown}) is not a node of the cluster at {address}: `ray "
                f"start --address {gcs_address}` first (the cluster still lists a node at "
                f"{shown}, but no raylet runs here and its port does not answer: this "
                "machine's node from before it restarted, which Ray drops within a minute)",
                where="--address",
                help="`singa train` and `singa submit` run a Ray driver, which Ray allows only "
                "on a node; `singa jobs|logs|stop --address` work from any machine with the "
                "token",
            )
        return SingaError(
            f"this machine's Ray node ({mine}) runs its raylet in another PID namespace: Ray "
            "lets a driver join only where the raylet sees its pid (a container that shares "
            "the node's network but not its processes)",
            where="--address",
            help="run singa in the node's PID namespace (`docker run --pid=host ...`), or make "
            f"this container a node of its own: `ray start --address {gcs_address}` in it",
        )
    mine = mine or ", ".join(sorted(own)) or "?"
    shown = ", ".join(nodes) or "none"
    return SingaError(
        f"this machine ({mine}) is not a node of the cluster at {address}: `ray start "
        f"--address {gcs_address}` first (its live nodes: {shown})",
        where="--address",
        help="`singa train` and `singa submit` run a Ray driver, which Ray allows only on a "
        "node; `singa jobs|logs|stop --address` work from any machine with the token. The "
        "join line, with its ports, is in docs/guide/clusters.md",
    )


def check_driver(address: str, gcs_address: str) -> None:
    """Raise the located error when this machine cannot join the cluster as a driver."""
    host, _, port = gcs_address.rpartition(":")
    host = host.strip("[]")
    try:
        ports = live_nodes(gcs_address)
    except Exception:  # noqa: BLE001 - no answer: ray.init and the guards say what follows
        return
    mine, own, visible = source_address(host, int(port)), local_addresses(), raylet_here()
    here = [a for a in ports if a in own | {mine}]
    answers = visible or any(listening(a, ports[a]) for a in here if ports[a])
    driver = driver_problem(address, gcs_address, sorted(ports), mine, visible, own,
                            raylet_answers=answers)  # fmt: skip
    if driver is not None:
        raise driver
