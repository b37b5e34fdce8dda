"""Contract checks for worker plugins (TrainOneBatch algorithms).

A worker reaches Params only through its :class:`~singa_core.contracts.stub.ParamStub`. The
:class:`RecordingStub` here behaves like a strict remote server:

* a Param's value is hidden (NaN) until the worker calls ``collect(p)`` for it, and hidden
  again once all the gradients the step owes for it have been sent (the server then holds a
  newer value that must be collected before the next use);
* ``update(step, p)`` records the gradient and then scribbles over ``p.grad`` (the server
  may reuse it as scratch), so a worker that reads a sent gradient again sees NaN.

:func:`check_worker` runs a worker for a few steps over a prepared job with that stub and
checks that every layer's Params were collected before the layer ran, that each gradient
was sent exactly once per step (``net.contributions()`` per owner, never one gradient
array twice), finite and not all zero, and that ``test_one_batch`` leaves the Params alone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from singa_core.contracts.layer import kTest, kTrain
from singa_core.contracts.stub import ParamStub


class RecordingStub(ParamStub):
    """A ParamStub that records ``("collect", name)`` and ``("update", name, nonzero)`` in
    :attr:`events` and enforces the collect/send protocol (see the module docstring).
    Give it the net (``RecordingStub(net)``) to enforce; without one it only records."""

    def __init__(self, net=None) -> None:
        self.events: list[tuple] = []
        self.net = net
        self.errors: list[str] = []
        self._hidden: dict[int, np.ndarray] = {}  # owner id -> true value while hidden
        self._sent: dict[int, int] = {}  # owner id -> gradients sent this step
        self._sent_arrays: set[int] = set()
        self.expected = net.contributions() if net is not None else {}
        self.owners = {p.owner.id: p.owner for p in net.params} if net is not None else {}

    # -- the protocol --------------------------------------------------------------------
    def begin_step(self) -> None:
        self._sent.clear()
        self._sent_arrays.clear()
        for oid in self.owners:
            self._hide(oid)

    def end_step(self, step: int) -> None:
        for oid, want in self.expected.items():
            got = self._sent.get(oid, 0)
            if got != want:
                self.errors.append(
                    f"step {step}: {want} gradient(s) of {self.owners[oid].name} owed, {got} sent"
                )
        for oid in list(self._hidden):
            self._show(oid)

    def visible(self, p) -> bool:
        return p.owner.id not in self._hidden

    def _hide(self, oid: int) -> None:
        if oid not in self._hidden:
            p = self.owners[oid]
            self._hidden[oid] = p.value.copy()
            p.value[...] = np.nan

    def _show(self, oid: int) -> None:
        saved = self._hidden.pop(oid, None)
        if saved is not None:
            self.owners[oid].value[...] = saved

    def collect(self, param) -> None:
        self.events.append(("collect", param.name))
        if self.net is not None:
            self._show(param.owner.id)

    def update(self, step: int, param) -> None:
        grad = param.grad
        finite = bool(np.isfinite(grad).all())
        self.events.append(("update", param.name, finite and bool(np.any(grad != 0))))
        if self.net is None:
            return
        if id(grad) in self._sent_arrays:
            self.errors.append(f"step {step}: the gradient of {param.name} was sent twice")
        self._sent_arrays.add(id(grad))
        if not finite:
            self.errors.append(
                f"step {step}: the gradient of {param.name} sent is not finite (a value "
                "used before collect, or a sent gradient reused)"
            )
        oid = param.owner.id
        self._sent[oid] = self._sent.get(oid, 0) + 1
        grad[...] = np.nan  # the server may use it as scratch
        if self._sent[oid] >= self.expected.get(oid, 1):
            self._hide(oid)  # the server now holds a newer value


def _guard(layer, stub: RecordingStub, order: list) -> None:
    """Record forward/backward calls in ``order`` and note uses of uncollected Params."""
    for what in ("forward", "backward"):
        inner = getattr(layer, what)

        def wrapped(*a, _inner=inner, _what=what, _layer=layer):
            order.append((_what, _layer.name))
            for p in _layer.params:
                if not stub.visible(p):
                    stub.errors.append(
                        f"layer '{_layer.name}' ran {_what} before its Param {p.name} was "
                        "collected (call stub.collect(p) before a Param's value is used)"
                    )
            return _inner(*a)

        setattr(layer, what, wrapped)


def check_worker(job: str | Path, *, steps: int = 2, seed: int = 0) -> RecordingStub:
    """Prepare a job (a job.conf path, or its text), run its worker for ``steps`` steps
    against a :class:`RecordingStub` and check the protocol; returns the stub, whose
    ``events`` list the calls in order (``("collect", param)``, ``("forward", layer)``,
    ``("backward", layer)``, ``("update", param, nonzero)``). Raises AssertionError
    listing the violations."""
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job

    folder = Path(tempfile.mkdtemp(prefix="singa-check-worker-"))
    if isinstance(job, Path) or ("{" not in job and Path(job).is_file()):
        cfg = load_job(Path(job))
    else:
        path = folder / "job.conf"
        path.write_text(job)
        cfg = load_job(path)
    workspace = None if cfg.job.cluster.workspace else str(folder / "workspace")
    prepared = prepare_job(cfg, get_host(), seed=seed, workspace=workspace)
    net = prepared.nets[kTrain]
    worker = prepared.make_worker()
    stub = RecordingStub(net)
    for layer in net.layers:
        _guard(layer, stub, stub.events)
    for step in range(steps):
        stub.begin_step()
        worker.train_one_batch(step, net, stub)
        stub.end_step(step)
    assert not stub.errors, "worker protocol violations:\n  " + "\n  ".join(stub.errors[:20])
    sent = [e for e in stub.events if e[0] == "update"]
    assert sent, "the worker sent no gradients"
    assert any(e[2] for e in sent), "every gradient sent was zero"
    if kTest in prepared.nets:
        test_net = prepared.nets[kTest]
        before = [p.value.copy() for p in test_net.params]
        worker.start_evaluation(kTest, test_net)
        worker.test_one_batch(kTest, test_net)
        for p, v in zip(test_net.params, before, strict=True):
            np.testing.assert_array_equal(p.value, v, err_msg=f"test_one_batch changed {p.name}")
    return stub


def expected_bp_order(layers: Sequence) -> list[tuple[str, str]]:
    """SINGA's kBP order over ``layers``: collect a layer's Params, forward it; then in
    reverse, backward a layer and send its Params' gradients."""
    out: list[tuple[str, str]] = []
    for layer in layers:
        out += [("collect", p.name) for p in layer.params] + [("forward", layer.name)]
    for layer in reversed(layers):
        out += [("backward", layer.name)] + [("update", p.name) for p in layer.params]
    return out
