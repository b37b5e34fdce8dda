"""Numeric guards: training must not go on, or be saved, once its numbers stop being finite.

* :func:`check_config`: a non-finite learning rate, momentum, weight decay (any float field
  of ``updater``) or Param ``lr_scale``/``wd_scale`` is a located error before step 0.
* :class:`NumericGuard`: after every training step, the learning rate, the metrics the
  layers accumulated (the loss) and every layer's output and output gradient must be
  finite. Otherwise :class:`NonFiniteError` stops the job at that step (exit status
  :data:`NON_FINITE_EXIT`, 3), naming the first layer/Param in net order that is
  non-finite (outputs, metrics, Param gradients and values are all searched then).
  Arrays on a GPU are checked there every step by the kernel ``nonfinite_check`` (one
  launch for all of them), which records the first non-finite step in a device flag; the
  flag is read (:meth:`NumericGuard.settle`) at displayed steps, before every checkpoint
  and at the end, so a step reads nothing back, and the error names the step where the
  numbers first went non-finite. A NaN
  or infinite Param gradient or value shows in these arrays at the step it appears,
  except when a finite product overflows in the gradient or the update: then the next
  step's outputs are non-finite, and the checkpoint writer refuses such values anyway.
  The loop writes no checkpoint after the error, so the newest checkpoint is the last good
  state and ``--resume`` continues from it.
* :func:`check_checkpoint_values`: the last line of defence in
  :func:`singa_core.running.checkpoint.write_checkpoint`; a non-finite value is never written.

Cost: one summation per output/gradient array and step (a sum is finite iff every
element is, unless a finite array overflows; only then the exact ``isfinite`` pass runs):
O(batch x units), not O(Params). Measured on the MNIST MLP with
``benchmarks/numeric_guard.py`` (docs/performance.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

import numpy as np

from singa_core.contracts.cuda import CUPY, launch_multi_tensor, multi_tensor_source
from singa_core.contracts.device import array_module, is_host_array, to_host
from singa_core.contracts.errors import SingaError
from singa_core.contracts.kernels import define_kernel, kernels_for
from singa_core.contracts.layer import host_metric_sums

NON_FINITE_EXIT = 3


class NonFiniteError(SingaError):
    """Training produced a NaN or infinity (exit status 3); ``step`` is where it was seen."""

    exit_code = NON_FINITE_EXIT

    def __init__(self, message: str, *, step: int | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.step = step


def all_finite(a: np.ndarray) -> bool:
    """True if every element of ``a`` is finite (one summation in the common case)."""
    if a.size == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(a, axis=None))
    if math.isfinite(total):
        return True
    return bool(np.isfinite(a).all())  # NaN/inf, or only a finite sum that overflowed


#: the device flag's value while every checked step was finite
NO_STEP = 2**31 - 1


def nonfinite_check_host(arrays, flag, step: int) -> None:
    """``flag[0] = min(flag[0], step)`` if any of ``arrays`` (float32) holds a NaN or an
    infinity."""
    if not all(all_finite(a) for a in arrays):
        flag[0] = min(int(flag[0]), int(step))


_NONFINITE_SOURCE = multi_tensor_source(
    "singa_nonfinite_check",
    tensors=1,
    params=0,
    scalars="int* flag, int step",
    body="if (!isfinite(T0[j])) atomicMin(flag, step);",
)


def nonfinite_check_cuda(arrays, flag, step: int, rt=CUPY) -> None:
    launch_multi_tensor(
        rt, _NONFINITE_SOURCE, "singa_nonfinite_check", [list(arrays)], [], (flag, np.int32(step))
    )


define_kernel(
    "nonfinite_check",
    host=nonfinite_check_host,
    cuda=nonfinite_check_cuda,
    doc="the numeric guard's check of a step's arrays: the first non-finite step in a flag",
)


# -- the configuration -------------------------------------------------------------------
def _float_fields(msg, path: str) -> Iterable[tuple[str, float]]:
    for fd, value in msg.ListFields():
        name = f"[{fd.full_name}]" if fd.is_extension else fd.name
        repeated = fd.is_repeated
        if fd.message_type is not None:
            items = enumerate(value) if repeated else [(None, value)]
            for i, m in items:
                yield from _float_fields(m, f"{path}.{name}" + (f"[{i}]" if i is not None else ""))
        elif fd.cpp_type in (fd.CPPTYPE_FLOAT, fd.CPPTYPE_DOUBLE):
            for i, v in enumerate(value) if repeated else [(None, value)]:
                yield f"{path}.{name}" + (f"[{i}]" if i is not None else ""), float(v)


def _where(cfg, path: str):
    """The ``-o`` that set ``path``, else its place in job.conf."""

    def norm(p: str) -> str:
        return re.sub(r"\[0\]", "", p.replace(" ", ""))

    for ov in reversed(cfg.overrides):
        if norm(ov.split("=", 1)[0]) == norm(path):
            return f"command line: -o {ov}"
    return cfg.locate(path)


def check_config(cfg) -> None:
    """Refuse non-finite updater hyper-parameters and Param lr/wd scales (located)."""
    job = cfg.job
    found = list(_float_fields(job.updater, "updater")) if job.HasField("updater") else []
    for i, layer in enumerate(job.neuralnet.layer):
        for j, p in enumerate(layer.param):
            for name in ("lr_scale", "wd_scale"):
                if p.HasField(name):
                    found.append((f"neuralnet.layer[{i}].param[{j}].{name}", getattr(p, name)))
    for path, value in found:
        if not math.isfinite(value):
            field = path.rsplit(".", 1)[-1]
            raise SingaError(
                f"{path} is {value}: learning rates, momentum, weight decay and the other "
                "updater settings must be finite numbers",
                where=_where(cfg, path),
                help=f"set {field} to a finite value",
            )


# -- during training ---------------------------------------------------------------------
def _describe(value) -> str:
    if not isinstance(value, str | int | float) and hasattr(value, "dtype"):
        value = to_host(value)
    if isinstance(value, np.ndarray):
        n_nan = int(np.isnan(value).sum())
        n_inf = int(np.isinf(value).sum())
        parts = [f"{n_nan} NaN"] if n_nan else []
        parts += [f"{n_inf} infinite"] if n_inf else []
        return f"{' and '.join(parts)} of {value.size} values"
    return str(value)


class NumericGuard:
    """Checks a worker's net after each training step (see the module docstring)."""

    def __init__(self, net, lr: Callable[[int], float] | None = None) -> None:
        self.net = net
        self.lr = lr
        self._flag = None  # the device flag (int32, NO_STEP while all is finite)
        self._device_arrays: list | None = None

    def check(self, step: int) -> None:
        """Raise :class:`NonFiniteError` if step ``step`` left anything non-finite on the
        host; queue the check of the device's arrays (read by :meth:`settle`)."""
        if self.lr is not None:
            rate = self.lr(step)
            if not math.isfinite(rate):
                raise NonFiniteError(
                    f"the learning rate is {rate} at step {step}",
                    step=step,
                    help="check the learning-rate schedule (updater.learning_rate)",
                )
        ok = all(
            math.isfinite(v) for layer in self.net.layers for v in host_metric_sums(layer).values()
        )
        device = []
        if ok:
            for a in self._activations():
                if not is_host_array(a) and a.dtype == np.float32:
                    device.append(a)
                elif not all_finite(a):  # the host's (a device's float64 ones: a read)
                    ok = False
                    break
        if not ok:
            self._raise(step)
        if device:
            if self._flag is None:
                self._flag = array_module(device[0]).full(1, NO_STEP, dtype=np.int32)
            kernels_for(device[0]).nonfinite_check(device, self._flag, step)

    def settle(self) -> None:
        """Read the device flag (one read): raise :class:`NonFiniteError` naming the first
        step whose device arrays went non-finite."""
        if self._flag is None:
            return
        first = int(to_host(self._flag)[0])
        if first != NO_STEP:
            self._raise(first)

    def check_start(self, step: int) -> None:
        """Before the first step: every Param value (from its init or a checkpoint) must be
        finite (one full pass, once)."""
        for layer in self.net.layers:
            for p in layer.params:
                if p.is_owner and not all_finite(p.value):
                    raise NonFiniteError(
                        f"Param '{p.name}' of layer '{layer.name}' is non-finite before step "
                        f"{step} ({_describe(p.value)})",
                        step=step,
                        help="check the Param's init in job.conf, or the checkpoint it was "
                        "loaded from",
                    )

    def _activations(self) -> Iterable[np.ndarray]:
        """Every guarded layer's output and output gradient (re-read each step: layers may
        re-allocate them), floating-point ones of any device."""
        for layer in self.net.layers:
            if not layer._guarded:
                continue
            for a in (layer.data, layer.grad):
                if a is not None and getattr(a, "dtype", None) is not None:
                    if a.dtype.kind == "f" and a.size:
                        yield a

    def findings(self) -> list[str]:
        """Everything non-finite, in the order a step computes it: Param values (the step's
        inputs) and layer outputs in net order, metrics, then output and Param gradients in
        backward (reverse net) order. The first is where the step went wrong."""
        return [text for text, _ in self._findings()]

    def _findings(self) -> list[tuple[str, object]]:
        """:meth:`findings`, each with the layer it is about."""

        def bad(a) -> bool:
            return (
                a is not None and hasattr(a, "dtype") and a.dtype.kind == "f" and not all_finite(a)
            )

        layers = self.net.layers
        out = []
        for layer in layers:
            for p in layer.params:
                if p.is_owner and bad(p.value):
                    text = f"Param '{p.name}' of layer '{layer.name}' ({_describe(p.value)})"
                    out.append((text, layer))
            if bad(layer.data):
                out.append((f"the output of layer '{layer.name}' ({_describe(layer.data)})", layer))
        for layer in layers:
            for k, v in host_metric_sums(layer).items():
                if not math.isfinite(v):
                    out.append((f"metric '{k}' of layer '{layer.name}' ({v})", layer))
        for layer in reversed(layers):
            if bad(layer.grad):
                text = f"the output gradient of layer '{layer.name}' ({_describe(layer.grad)})"
                out.append((text, layer))
            for p in layer.params:
                if p.grad_owner is p and bad(p.grad):
                    out.append(
                        (
                            f"the gradient of Param '{p.name}' of layer '{layer.name}' "
                            f"({_describe(p.grad)})",
                            layer,
                        )
                    )
        return out

    def _raise(self, step: int) -> None:
        pairs = self._findings()
        found = [text for text, _ in pairs] or ["a value of the net"]
        where = None
        if pairs:  # located at the job.conf line of the first layer that went non-finite
            ctx = getattr(pairs[0][1], "ctx", None)
            try:
                where = ctx.locate(None) if ctx is not None else None
            except Exception:  # a plugin's context without a location: the message says
                where = None
        raise NonFiniteError(
            f"training went non-finite at step {step}: first {found[0]}",
            step=step,
            where=where,
            notes=[f"also {f}" for f in found[1:6]]
            + ([f"and {len(found) - 6} more"] if len(found) > 6 else []),
            help="lower the learning rate (updater.learning_rate.base_lr) or check the data "
            "and the Params' init; no checkpoint was written after this step",
        )


def check_checkpoint_values(records, step: int) -> None:
    """Refuse to checkpoint non-finite Param values (records: checkpoint.ParamRecord)."""
    for r in records:
        if not all_finite(to_host(r.value)):
            raise NonFiniteError(
                f"Param '{r.name}' is non-finite at step {step} "
                f"({_describe(to_host(r.value))}); the checkpoint was not written",
                step=step,
                help="lower the learning rate (updater.learning_rate.base_lr) or check the "
                "data and the Params' init",
            )
