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


def test_any_error_raised_by_rays_own_code_on_a_call_is_a_loss_but_a_peers_error_is_not():
    """A raylet killed under a worker can surface as a ``GetTimeoutError`` or another
    error raised inside Ray's own call (CI saw one reach the user as a traceback); the
    same error raised by singa's code, or a peer's own ``RayTaskError``, is not a loss."""
    timeout = ray_exceptions.GetTimeoutError("Get timed out")
    assert is_loss(_raised(timeout, "ray._private.worker"))
    assert not is_loss(_raised(ValueError("a bug"), "singa_builtins.engines.ray.process"))
    assert is_loss(_raised(KeyError("freed"), "ray._raylet"))
    peer = ray_exceptions.RayTaskError("update", "Traceback ...", ValueError("bad value"))
    assert not is_loss(_raised(peer, "ray._private.worker"))


def test_a_ray_thread_ending_on_a_lost_gcs_goes_to_the_driver_log_not_the_terminal(tmp_path, capfd):
    """Ray's ``ray_listen_error_messages`` thread dies with an RpcError when the GCS goes
    (CI saw its traceback under the located message); other threads print as before."""
    import threading

    from singa_builtins.engines.ray.runtime import _quiet_ray_threads

    previous = threading.excepthook
    log = tmp_path / "ray-driver.log"
    try:
        threading.excepthook = threading.__excepthook__  # Python's own, not pytest's
        _quiet_ray_threads(log)

        def fail():
            raise RuntimeError("recvmsg: Connection reset by peer")

        for name in ("ray_listen_error_messages", "worker-0-0"):
            t = threading.Thread(target=fail, name=name)
            t.start()
            t.join()
    finally:
        threading.excepthook = previous
    err = capfd.readouterr().err
    assert "ray_listen_error_messages" not in err and "Exception in thread worker-0-0" in err
    assert "Ray's thread ray_listen_error_messages ended" in log.read_text()
