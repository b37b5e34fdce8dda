"""Interfaces of the server-side update rule: Updater and the learning-rate change method.

An Updater runs on the parameter server for every Param slice (SINGA 0.3 §1.6), on the
device the slice lives on: its arrays may be CuPy arrays (the in-process engine keeps a GPU
worker's Params there), so an updater allocates only ``*_like`` them or through
:meth:`Updater.scratch`, and calls numpy's functions, which dispatch to their module. The server
hands it the summed gradient of a slice and ``scale = 1/num_total`` (the number of
data-parallel replicas that contributed); the updater clips, scales, adds weight decay and
applies its rule to ``value`` in place. Per-slice history lives in ``state``, a dict of
arrays created by :meth:`Updater.init_state`, so it can be checkpointed and restored.

On a GPU a server that holds a whole step's slices hands them over together:
:meth:`Updater.apply_many` gets one :class:`UpdateItem` per slice, and an updater that
overrides it runs its rule over all of them in one kernel launch (the kernel seam,
:mod:`singa_core.contracts.kernels`); the default applies them one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from singa_core.contracts.blas import axpy
from singa_core.contracts.capture import StepValue
from singa_core.contracts.cuda import CUPY, launch_multi_tensor, multi_tensor_source
from singa_core.contracts.device import array_module
from singa_core.contracts.errors import SingaError
from singa_core.contracts.kernels import define_kernel, kernels_for

__all__ = [
    "WEIGHT_DECAY_MODES",
    "LRChange",
    "UpdateItem",
    "Updater",
    "axpy",
    "define_update_kernel",
]


@dataclass
class UpdateItem:
    """One slice's update, as :meth:`Updater.apply` takes it."""

    value: np.ndarray
    grad: np.ndarray
    state: dict[str, np.ndarray]
    scale: float = 1.0
    lr_scale: float = 1.0
    wd_scale: float = 1.0


class LRChange:
    """Contract for learning-rate change plugins (SINGA's LRGenerator / ChangeMethod).

    Constructed as ``cls(conf)`` with the ``singa.LRGenProto``; ``lr(step)`` returns the
    base learning rate for a training step. Must be a pure function of ``step`` so that a
    resumed job continues exactly.
    """

    def __init__(self, conf) -> None:
        self.conf = conf
        self.base_lr = float(conf.base_lr)

    def __call__(self, step: int) -> float:  # pragma: no cover
        raise NotImplementedError


class Updater:
    """Contract for updater plugins (kSGD, kAdaGrad, ...).

    Constructed as ``cls(conf, lr)`` with the ``singa.UpdaterProto`` and its LRChange.
    ``state_names`` lists the per-slice history arrays (zeros at start).
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, conf, lr: LRChange) -> None:
        self.conf = conf
        self.lr = lr
        self.momentum = float(conf.momentum)
        self.weight_decay = float(conf.weight_decay)
        self.delta = float(conf.delta)
        self.clip_low = float(conf.clip_low)
        self.clip_high = float(conf.clip_high)
        self._scratch: dict[int, np.ndarray] = {}  # see scratch()

    def init_state(self, value: np.ndarray) -> dict[str, np.ndarray]:
        return {n: np.zeros_like(value) for n in self.state_names}

    def require_positive_delta(self) -> None:
        """For updaters dividing by ``sqrt(... + delta)``: a configuration error unless
        ``delta > 0``."""
        if not self.delta > 0:
            raise SingaError(
                f"{getattr(self, 'type_names', (type(self).__name__,))[0]} needs "
                f"updater.delta > 0 (got {self.delta})",
                help="leave delta out for the default 1e-8, or set e.g. `delta: 1e-8`",
                field="delta",
            )

    def rate_at(self, step: int, like):
        """The step's learning rate ``lr(step)`` in a (1,) float64 array on ``like``'s
        device, for update kernels (a :class:`~singa_core.contracts.capture.StepValue`:
        a replayed step's kernels read the rate from it)."""
        key = ("rate", type(like))
        rate = self._scratch.get(key)
        if rate is None:
            rate = self._scratch[key] = StepValue(self.lr, like)
        return rate.at(step)

    def scratch(self, like: np.ndarray) -> np.ndarray:
        """A float32 work array shaped like ``like``: one per size, reused by every later
        update (not state: never checkpointed)."""
        key = (like.size, type(like))  # one per size and device kind
        buf = self._scratch.get(key)
        if buf is None:
            buf = self._scratch[key] = array_module(like).empty(like.size, np.float32)
        return buf.reshape(like.shape)

    def prologue(
        self,
        value: np.ndarray,
        grad: np.ndarray,
        scale: float,
        wd_scale: float,
        clip: bool = True,
        weight_decay: bool = True,
    ) -> np.ndarray:
        """SINGA's common first steps, in its order: clip, scale, add weight decay.

        The weight decay added here is *coupled* (L2: ``grad += weight_decay · wd_scale ·
        value``, so it passes through the update rule). Updaters with *decoupled* decay
        (AdamW, Lion) pass ``weight_decay=False`` and call :meth:`decay_weights`.
        Modifies and returns ``grad`` (the server's own buffer).
        """
        if clip and self.clip_high > self.clip_low:
            np.clip(grad, self.clip_low, self.clip_high, out=grad)
        if scale != 1.0:
            grad *= np.float32(scale)
        wd = self.weight_decay * wd_scale
        if weight_decay and wd > 0:
            axpy(wd, value, grad)
        return grad

    def decay_weights(self, value: np.ndarray, lr: float, wd_scale: float) -> None:
        """Decoupled weight decay: ``value -= lr · weight_decay · wd_scale · value`` with
        ``lr`` the step's effective rate (``self.lr(step) · lr_scale``). Call it before the
        rule changes ``value``, so the decay is taken on the old weights (AdamW's
        ``w ← w − lr·(u + λw)``)."""
        wd = self.weight_decay * wd_scale
        if wd > 0 and lr != 0:
            value *= np.float32(1.0 - lr * wd)

    def apply(
        self,
        step: int,
        value: np.ndarray,
        grad: np.ndarray,
        state: dict[str, np.ndarray],
        *,
        scale: float = 1.0,
        lr_scale: float = 1.0,
        wd_scale: float = 1.0,
    ) -> None:  # pragma: no cover
        raise NotImplementedError

    def fold(
        self, step: int, *, scale: float = 1.0, lr_scale: float = 1.0, wd_scale: float = 1.0
    ) -> tuple[float, float] | None:
        """``(alpha, beta)`` when step ``step``'s rule on a slice is ``value ← beta·value +
        alpha·grad`` (the same as :meth:`apply` up to rounding), so that a server may let the
        gradient's GEMM apply the update (:meth:`singa_core.param.Param.set_grad_product`);
        None, the default, when the rule needs the gradient itself (a history, clipping, an
        adaptive rate)."""
        return None

    def host_compiler_memory(self) -> tuple[str, int, str, str] | None:
        """``(key, bytes, row, note)`` of a compiler the rule loads once in a process on the
        host (numba for a compiled pass), which the job's memory estimate charges once per
        ``key`` in a row ``(row)`` with ``note`` under the table, as
        :func:`singa_core.memory.charge_once` does for the layers' compiled kernels (the
        same key: charged once for all); None, the default, when it loads none."""
        return None

    #: the kernel (:func:`define_update_kernel`) that applies this rule to many slices in
    #: one launch on a GPU, or None
    update_kernel: str | None = None

    def apply_many(self, step: int, items: list[UpdateItem]) -> None:
        """Apply step ``step`` to several slices: the same as :meth:`apply` on each in
        turn; through :attr:`update_kernel` where the updater names one (one launch on a
        GPU), else one by one."""
        if self.update_kernel is not None and items:
            getattr(kernels_for(items[0].value), self.update_kernel)(self, step, items)
            return
        for it in items:
            self.apply(
                step,
                it.value,
                it.grad,
                it.state,
                scale=it.scale,
                lr_scale=it.lr_scale,
                wd_scale=it.wd_scale,
            )


class EvaluationOnly(Updater):
    """The updater of a job run only to evaluate its test net (``singa test`` of a job.conf
    without ``updater``, which SINGA 0.3's test mode allowed, e.g. char-rnn's sample.conf):
    it holds no history and has no learning rate, and is never asked to update."""

    def __init__(self) -> None:
        from singa_core.schema import job_pb2

        super().__init__(job_pb2.UpdaterProto(), None)

    def apply(self, step, value, grad, state, **scales) -> None:
        raise RuntimeError("a job without an updater was asked to train")


# -- an updater's rule over many slices in one launch -----------------------------------------
#: how an update kernel's prologue treats ``weight_decay`` (see :meth:`Updater.prologue`
#: and :meth:`Updater.decay_weights`)
WEIGHT_DECAY_MODES = ("coupled", "decoupled")


def _prologue(clip: bool, weight_decay: str) -> str:
    """SINGA's prologue in CUDA C (see :meth:`Updater.prologue`): ``g`` clipped and
    scaled; ``rate`` the slice's learning rate; the weight decay *coupled* (added to ``g``,
    so it passes through the rule) or *decoupled* (the value shrunk by ``1 − rate·wd``
    before the rule, as :meth:`Updater.decay_weights` does)."""
    code = (
        "float g = T1[j];\n"
        + ("if (clip) g = fminf(fmaxf(g, clip_low), clip_high);\n" if clip else "")
        + "if (P2 != 1.0f) g *= P2;\n"
    )
    if weight_decay == "coupled":
        code += "if (P1 > 0.0f) g = fmaf(P1, T0[j], g);\n"
    code += "const float rate = (float)(lr_at[0] * (double)P0);\n"
    if weight_decay == "decoupled":
        code += "if (P1 > 0.0f && rate != 0.0f) T0[j] = T0[j] * (1.0f - rate * P1);\n"
    return code


def define_update_kernel(
    name: str, body: str, *, states: tuple[str, ...], consts: tuple[str, ...] = (),
    clip: bool = True, weight_decay: str = "coupled", doc: str = "",
) -> None:  # fmt: skip
    """Define the kernel ``name`` applying an updater's rule to a step's slices.

    Its host implementation is the updater's own :meth:`Updater.apply`, slice by slice (so
    the CPU and the stand-in compute exactly that); its CUDA implementation is one launch
    over every slice with SINGA's prologue (clip when ``clip``, scale, weight decay
    ``"coupled"`` or ``"decoupled"``: :data:`WEIGHT_DECAY_MODES`) followed by ``body``. In
    ``body``: ``T0[j]`` the value, ``g`` the prepared gradient, ``T2[j]``… the state arrays
    in the order of ``states``, ``rate`` the slice's learning rate, and each name of
    ``consts`` (float attributes of the updater, e.g. ``rho``). A state the updater does
    not keep (kSGD's history without momentum) is passed as the value array: the body
    must not touch it then. An updater class names the kernel in
    :attr:`Updater.update_kernel`; :func:`singa_core.testing.check_updater` runs it against
    :meth:`Updater.apply` in emulated CUDA."""
    if weight_decay not in WEIGHT_DECAY_MODES:
        raise SingaError(
            f"update kernel '{name}': weight_decay must be one of "
            f"{', '.join(WEIGHT_DECAY_MODES)}, not {weight_decay!r}",
            help="'coupled' adds the decay to the gradient (L2, SINGA's), 'decoupled' "
            "shrinks the weights before the rule (AdamW, Lion)",
        )
    scalars = ", ".join(
        ["const double* __restrict__ lr_at", "float clip_low", "float clip_high", "int clip"]
        + [f"float {c}" for c in consts]
    )
    source = multi_tensor_source(
        f"singa_{name}", tensors=2 + len(states), params=3, scalars=scalars,
        body=_prologue(clip, weight_decay) + body,
    )  # fmt: skip

    def host(updater, step, items) -> None:
        for it in items:
            updater.apply(
                step, it.value, it.grad, it.state,
                scale=it.scale, lr_scale=it.lr_scale, wd_scale=it.wd_scale,
            )  # fmt: skip

    def cuda(updater, step, items, rt=CUPY) -> None:
        tensors = [[it.value for it in items], [it.grad for it in items]]
        tensors += [[_state(it, s) for it in items] for s in states]
        params = [
            [it.lr_scale for it in items],
            [updater.weight_decay * it.wd_scale for it in items],
            [it.scale for it in items],
        ]
        lo, hi = updater.clip_low, updater.clip_high
        launch_multi_tensor(
            rt, source, f"singa_{name}", tensors, params,
            (updater.rate_at(step, items[0].value), np.float32(lo), np.float32(hi),
             np.int32(clip and hi > lo), *(np.float32(getattr(updater, c)) for c in consts)),
        )  # fmt: skip

    cuda.source = source
    define_kernel(
        name, host=host, cuda=cuda,
        doc=doc or f"the {name} rule over many slices (one launch on a GPU)",
    )  # fmt: skip


def _state(item: UpdateItem, name: str):
    state = item.state.get(name)
    return item.value if state is None else state
