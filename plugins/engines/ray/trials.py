"""``singa tune --engine ray``: a study's trials on a Ray cluster (``Engine.trial_runner``).

Each trial is an actor (:class:`TrialActor`) that reserves the trial's CPUs
(``--trial-threads``, default 1): Ray's scheduler places it on a node with that much free,
and there it runs the trial as on one machine (``singa_core.tuning.launch.TrialProcess``:
``singa train`` in its own process group, SIGTERM when the actor's process dies, its
metrics.jsonl read as it lands). The tuner (the driver) polls each actor for its exit
status and new records, stops it with SIGTERM through the actor, and kills every actor it
made by handle at the end; the study's store stays with the tuner. The job's paths and the
study folder must be the same on every node (a shared file system), as for cluster jobs.

The cluster is joined as ``singa train --engine ray`` joins it (``runtime.Runtime``: the
token checked before ``ray.init``, a cluster without token authentication refused unless
``--insecure``); without ``--address``, a private one-node runtime with a token of its own.
An actor whose node is lost ends its trial as failed, naming the node; the study reruns
its values as a new trial from step 0 (a fresh workspace) and goes on.
"""

from __future__ import annotations

import socket

from singa_core.errors import SingaError

CALL_TIMEOUT = 60.0


class TrialActor:
    """One trial on the node Ray placed it on."""

    def __init__(self, launch: dict) -> None:
        from singa_core.tuning.launch import TrialLaunch, TrialProcess

        self.proc = TrialProcess(TrialLaunch(**launch))

    def node(self) -> str:
        return socket.gethostname()

    def state(self) -> tuple[int | None, list[dict]]:
        code = self.proc.poll()  # before reading: every record of an ended trial is read
        return code, self.proc.records()

    def stop(self) -> None:
        self.proc.stop()

    def reason(self, code: int | None) -> str:
        return self.proc.reason(code)

    def kill(self) -> None:
        self.proc.kill()


class RayTrialHandle:
    """The tuner's side of a :class:`TrialActor` (the methods of ``TrialProcess``)."""

    def __init__(self, actor, launch) -> None:
        import ray

        self.actor = actor
        self.launch = launch
        self.stopped = False
        self._records: list[dict] = []
        self._lost: str | None = None
        try:
            self.node = ray.get(actor.node.remote(), timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the actor could not start or its node died
            self.node = None
            self._lost = _cause(exc)

    @property
    def lost(self) -> bool:
        """Whether the trial was lost with its actor or node (not ended by itself): the
        study reruns its values as a new trial."""
        return self._lost is not None

    def poll(self) -> int | None:
        import ray

        if self._lost is not None:
            return -1
        try:
            code, records = ray.get(self.actor.state.remote(), timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - a lost actor, node or object
            self._lost = _cause(exc)
            return -1
        self._records += records
        return code

    def records(self) -> list[dict]:
        out, self._records = self._records, []
        return out

    def stop(self) -> None:
        if not self.stopped and self._lost is None:
            self.stopped = True
            self.actor.stop.remote()

    def close(self) -> None:
        """The trial has ended: its actor goes, and its CPUs with it."""
        self.kill()

    def kill(self) -> None:
        import ray

        try:
            ray.kill(self.actor)
        except Exception:  # noqa: BLE001, S110 - gone already
            pass

    def reason(self, code: int | None) -> str:
        import ray

        if self._lost is not None:
            return f"lost on the Ray cluster (node {self.node or '?'}): {self._lost}"
        try:
            return ray.get(self.actor.reason.remote(code), timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001
            return f"exit {code} on node {self.node}; its log could not be read: {_cause(exc)}"


class RayTrials:
    """Trials as actors on a Ray cluster (see the module docstring)."""

    def __init__(self, address: str | None, insecure: bool = False) -> None:
        from singa_builtins.engines.ray.runtime import Runtime

        self.runtime = Runtime(address, insecure=insecure)
        self.where = self.runtime.describe()
        self.handles: list[RayTrialHandle] = []

    def __enter__(self) -> RayTrials:
        self.runtime.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            for h in self.handles:  # ours only, by handle
                h.kill()
        finally:
            self.runtime.__exit__(*exc)

    def caught_signal(self) -> int | None:
        """A SIGINT/SIGTERM the runtime's catcher took (it replaces the tuner's handler)."""
        caught = self.runtime.signals.caught
        return caught[0] if caught else None

    def slots(self) -> int:
        import ray

        if not ray.is_initialized():
            return 1
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def start(self, launch) -> RayTrialHandle:
        import ray

        try:
            actor = (
                ray.remote(TrialActor)
                .options(num_cpus=launch.threads, max_restarts=0, max_concurrency=1)
                .remote(launch.as_dict())
            )
        except Exception as exc:  # noqa: BLE001
            raise SingaError(
                f"Ray refused the trial's actor: {_cause(exc)}",
                where="--engine ray",
                help="check the cluster (`ray status` on the head)",
            ) from None
        handle = RayTrialHandle(actor, launch)
        self.handles.append(handle)
        return handle


def _cause(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
