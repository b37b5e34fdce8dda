"""Which of Ray's errors mean "a process, node or object of the job is gone".

Ray reports a lost actor process as ``RayActorError`` (``ActorDiedError``,
``ActorUnavailableError``), but a lost node or raylet may surface first as an object that
cannot be fetched or rebuilt (``ObjectLostError`` and its kinds: ``OwnerDiedError``,
``ObjectReconstructionFailedError``, ``ObjectFetchTimedOutError``), as ``NodeDiedError``,
``WorkerCrashedError``, ``LocalRayletDiedError``, a removed placement group, an RPC that
fails, or as any of these inside the ``RayTaskError`` of an actor method that called a lost
peer. Inside an actor whose own raylet was killed, Ray's calls raise a plain ``OSError``
("Failed to read data from the socket", "Connection reset by peer"): an ``OSError`` raised
from Ray's own code is a loss too, as is any other exception (a ``GetTimeoutError``, a freed
object) whose raising frame is Ray's own, except a peer's ``RayTaskError`` (its cause
decides). All of them are a loss: the driver stops the job with
the located message (or restarts it with ``--max-restarts``). Any other Ray error is
reported as what it is, with exit 2, never as a traceback.
"""

from __future__ import annotations

LOSS_NAMES = (
    "RayActorError",
    "ObjectLostError",
    "NodeDiedError",
    "WorkerCrashedError",
    "LocalRayletDiedError",
    "ActorPlacementGroupRemoved",
    "TaskPlacementGroupRemoved",
    "ActorUnschedulableError",
    "OutOfMemoryError",
    "RpcError",
    "RaySystemError",
)


def loss_types() -> tuple[type, ...]:
    """The exception classes of :data:`LOSS_NAMES` this Ray has."""
    import ray.exceptions as rex

    return tuple(getattr(rex, name) for name in LOSS_NAMES if hasattr(rex, name))


def _raised_in_ray(exc: BaseException) -> bool:
    """Whether a frame of Ray's own modules is on ``exc``'s traceback."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name == "ray" or name.startswith("ray."):
            return True
        tb = tb.tb_next
    return False


def _innermost_in_ray(exc: BaseException) -> bool:
    """Whether the frame that raised ``exc`` is Ray's own (not singa's code after a call)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__", "")
    return name == "ray" or name.startswith("ray.")


def is_loss(exc: BaseException) -> bool:
    """Whether ``exc`` (or the cause inside a task error) reports a lost process, node or
    object."""
    import ray.exceptions as rex

    kinds = loss_types()
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, kinds):
            return True
        if isinstance(exc, OSError) and _raised_in_ray(exc):  # this node's raylet is gone
            return True
        if (
            not isinstance(exc, rex.RayTaskError)  # a peer's own error: its cause decides
            and type(exc).__name__ != "SingaError"
            and _innermost_in_ray(exc)
        ):  # raised by Ray's own code on a call to a peer (a timeout, a freed object...)
            return True
        exc = getattr(exc, "cause", None) if isinstance(exc, rex.RayTaskError) else None
        seen += 1
    return False


def summary(exc: BaseException) -> str:
    """``Type: first line`` of a Ray error, for messages."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
