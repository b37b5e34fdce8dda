"""Where the Ray engine runs: a private one-node runtime, or a cluster made with
``ray start``.

Without ``--address`` (and without ``RAY_ADDRESS``) a private local runtime is started and
shut down at the end (its processes with it). With ``--address HOST:PORT`` or ``auto`` the
job joins that cluster as a driver and leaves it running. Either way usage statistics are
off and no dashboard is started: Ray talks only to the cluster's own nodes.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass

from singa_core.contracts.resources import usable_cpus
from singa_core.errors import SingaError

PIP_COMMAND = "pip install 'singa-classic[ray]'"


def ray_installed() -> bool:
    """Whether Ray can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def import_ray():
    try:
        import ray
    except ImportError:
        raise SingaError(
            "the ray engine needs Ray, which is not installed",
            where="--engine ray",
            help=f"install it: {PIP_COMMAND}",
        ) from None
    return ray


@dataclass(frozen=True)
class Node:
    id: str  # Ray node id (hex)
    address: str  # its IP address
    cpus: float
    memory: float  # bytes

    def label(self) -> str:
        return f"{self.address} (node {self.id[:12]})"


class Runtime:
    """The Ray runtime of one ``singa`` command (a context manager)."""

    def __init__(self, address: str | None) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.private = self.address is None
        self._owned = False

    def describe(self) -> str:
        if self.private:
            return "a private one-node Ray runtime (shut down at the end)"
        return f"the Ray cluster at {self.address}"

    def __enter__(self) -> Runtime:
        ray = import_ray()
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        if ray.is_initialized():  # e.g. a program that runs several jobs
            return self
        kwargs = dict(
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=True,
        )
        try:
            if self.private:
                ray.init(address="local", num_cpus=usable_cpus(), **kwargs)
            else:
                ray.init(address=self.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SingaError(
                f"cannot connect to the Ray cluster at {self.address}: {exc}",
                where="--address",
                help="start it with `ray start --head` (and `ray start --address HEAD:PORT` on "
                "the other machines), then pass --address HEAD:PORT",
            ) from None
        self._owned = True
        return self

    def __exit__(self, *exc) -> None:
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False

    @staticmethod
    def nodes() -> list[Node]:
        """The cluster's live nodes."""
        import ray

        out = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources", {})
            cpus, memory = res.get("CPU", 0.0), res.get("memory", 0)
            out.append(Node(n["NodeID"], n["NodeManagerAddress"], cpus, memory))
        return sorted(out, key=lambda n: (n.address, n.id))
