"""Which Ray errors the Ray engine treats as a lost process, node or object
(plugins/engines/ray/faults.py): every one of them ends in the located exit-2 message or a
restart, never in a traceback."""

from __future__ import annotations

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions")

from singa_builtins.engines.ray.faults import is_loss, summary  # noqa: E402


def _raised(exc: BaseException, module: str = __name__) -> BaseException:
    """``exc`` raised from a function of module ``module`` (caught, with its traceback)."""
    scope = {"__name__": module}
    exec("def fail(exc):\n    raise exc\n", scope)  # noqa: S102 - a frame of that module
    try:
        scope["fail"](exc)
    except BaseException as caught:  # noqa: BLE001
        return caught
    raise AssertionError("not raised")


@pytest.mark.parametrize(
    "exc",
    [
        ray_exceptions.ObjectReconstructionFailedError("ffff" * 7),
        ray_exceptions.OwnerDiedError("ffff" * 7, None, ""),
        ray_exceptions.NodeDiedError("node gone"),
        ray_exceptions.WorkerCrashedError(),
        ray_exceptions.LocalRayletDiedError(),
        ray_exceptions.ActorUnavailableError("unavailable", b"\0" * 16),
    ],
    ids=lambda e: type(e).__name__,
)
def test_ray_reports_of_lost_processes_nodes_and_objects_are_losses(exc):
    assert is_loss(exc)


def test_an_oserror_from_rays_own_code_is_a_loss_and_any_other_is_not():
    dead_raylet = _raised(OSError("Failed to read data from the socket: End of file"),
                          "ray._private.worker")  # fmt: skip
    assert is_loss(dead_raylet)
    assert not is_loss(_raised(OSError("No space left on device")))
    assert not is_loss(ValueError("a bug"))


def test_a_task_error_wrapping_a_loss_is_a_loss():
    cause = ray_exceptions.OwnerDiedError("ffff" * 7, None, "")
    wrapped = ray_exceptions.RayTaskError("snapshot", "traceback text", cause)
    assert is_loss(wrapped)
    assert not is_loss(ray_exceptions.RayTaskError("snapshot", "tb", ValueError("bug")))


def test_summary_names_the_type_and_first_line():
    assert summary(ValueError("first\nsecond")) == "ValueError: first"
    assert summary(KeyError()) == "KeyError"
