"""Params (a layer's learnable tensors) and the ParamGenerator interface.

SINGA 0.3 conventions kept here: weights are stored ``(out, in)`` so ``fan_in`` is the number
of columns (``shape[1]``); a Param's ``version`` counts the updates applied to it (-1 before
initialisation); Params that share values (``share_from``, test nets) hold the very same
``value`` array, and each keeps its own ``grad`` — except the unrolled copies of a Param
(``"i#w"`` for i ≥ 1), which also use the gradient array of ``"0#w"`` (``grad_owner``).

A Param with ``learnable = False`` holds state its layer maintains itself (batch
normalisation's running statistics): the layer writes ``value`` in ``forward``; servers never
apply the updater to it (no gradient step, weight decay or momentum) but still count its
updates in ``version``, so collecting and checkpointing proceed as for other Params. It is
initialised from its ``param`` entry and checkpointed like any Param.
"""

from __future__ import annotations

import numpy as np

from singa_core.contracts.device import default_device, to_host

DTYPE = np.float32


class Param:
    """One learnable tensor: value, gradient, version and per-param hyper-parameters."""

    def __init__(
        self,
        proto,
        shape: tuple[int, ...],
        name: str | None = None,
        *,
        value: np.ndarray | None = None,
        grad: bool = True,
        device=None,
    ) -> None:
        """``value``: an existing float32 array of ``shape`` to use as the value (a deploy
        net's trained values, not copied); ``grad=False``: no gradient array (``None``);
        ``device``: where the value and gradient live (default: the device in effect, see
        :func:`singa_core.contracts.device.default_device`)."""
        self.device = device if device is not None else default_device()
        self.proto = proto  # singa.ParamProto
        self.name = name if name is not None else proto.name
        self.shape = tuple(int(s) for s in shape)
        if value is not None and (value.shape != self.shape or value.dtype != DTYPE):
            raise ValueError(
                f"param {self.name}: value {value.dtype}{tuple(value.shape)} does not fit "
                f"{DTYPE.__name__}{self.shape}"
            )
        self.value = value if value is not None else self.device.zeros(self.shape, DTYPE)
        self.grad = self.device.zeros(self.shape, DTYPE) if grad else None
        self.version = -1
        self.owner: Param = self  # the Param whose value array this one uses
        self.id = -1  # set by the net: position among all Params
        self.learnable = True  # False: layer-maintained state, never touched by the updater
        self.grad_owner: Param = self  # the Param whose grad array this one uses
        self.replica = False  # a data-parallel replica's copy (partition_dim 0, "w@i")
        #: set by an engine whose server lets this Param's update be folded into its
        #: gradient's GEMM (:meth:`set_grad_product`); None: the gradient goes to ``grad``
        self.fold = None
        #: set by zero_grad: this step's gradient is zero (the in-process stub consumes it)
        self.grad_zero = False
        #: set by a stub that counted the zero gradient without touching ``grad``: it is
        #: still zero, zero_grad need not fill it again
        self.grad_kept_zero = False

    def zero_grad(self) -> None:
        """This step's gradient of this Param is zero: for a layer that shares a Param and
        takes no part in its gradient (kRBMHid's weight: the visible layer computes it).
        ``grad`` holds zeros for any stub (a server may have used it as scratch since: it
        is filled again then); the in-process engine's stub counts the contribution
        without reading, adding or touching it, so there it is filled once."""
        if not self.grad_kept_zero:
            self.grad.fill(0)
        self.grad_kept_zero = False
        self.grad_zero = True

    def set_grad_product(self, a, b) -> None:
        """This step's gradient is the matrix product ``a @ b`` (2-D views whose product has
        ``grad``'s size; a layer's weight-gradient GEMM, e.g. ``gᵀ·x``).

        Normally the product is written to ``grad``. Where the engine folded the update into
        it (:attr:`fold`: a server whose rule is ``value ← β·value + α·grad``, plain SGD),
        the one GEMM applies this step's update to ``value`` instead and ``grad`` is not
        written: the gradient is never stored, and the update's pass over the weights is
        saved. So a layer calls it after everything else of its backward that reads
        ``value`` (the source's gradient ``g·W`` first)."""
        from singa_core.contracts.blas import gemm

        fold = self.fold
        coefficients = fold.take(self) if fold is not None else None
        if coefficients is not None:
            alpha, beta = coefficients
            gemm(a, b, self.value.reshape(a.shape[0], b.shape[1]), alpha=alpha, beta=beta)
            return
        gemm(a, b, self.grad.reshape(a.shape[0], b.shape[1]))

    @property
    def size(self) -> int:
        return int(self.value.size)

    @property
    def lr_scale(self) -> float:
        return float(self.proto.lr_scale)

    @property
    def wd_scale(self) -> float:
        return float(self.proto.wd_scale)

    @property
    def is_owner(self) -> bool:
        return self.owner is self

    def share_data_from(self, other: Param) -> None:
        """Use ``other``'s value array (values shared, gradient kept separate)."""
        if other.shape != self.shape:
            raise ValueError(
                f"cannot share {self.name} {self.shape} with {other.name} {other.shape}"
            )
        self.owner = other.owner
        if other.owner.device == self.device:
            self.value = other.owner.value
        else:  # a replica on another device (a hybrid group): a copy, see refresh()
            self.refresh()

    @property
    def is_mirror(self) -> bool:
        """A Param sharing its owner's values from another device: it holds a copy that
        the engine refreshes after every update of the owner (:meth:`refresh`)."""
        return self.owner is not self and self.value is not self.owner.value

    def refresh(self) -> None:
        """Copy the owner's values into a mirror (no-op for other Params)."""
        if self.owner is self or self.value is self.owner.value:
            return
        host = to_host(self.owner.value)
        self.value[...] = host if self.device.is_host else self.device.asarray(host)

    def share_grad_from(self, other: Param) -> None:
        """Also use ``other``'s gradient array (the unrolled copies of one Param: layers
        accumulate into it with ``kAggGrad`` and only ``other`` is sent to the servers)."""
        self.grad_owner = other.grad_owner
        self.grad = other.grad_owner.grad

    def __repr__(self) -> str:
        return f"Param({self.name!r}, shape={self.shape}, version={self.version})"


class ParamGenerator:
    """Contract for param-generator plugins (SINGA's ParamGenerator / InitMethod).

    Constructed as ``cls(conf)`` with the ``singa.ParamGenProto``; :meth:`fill` writes the
    initial values into ``value`` (float32, shape ``(out, in)`` for matrices) in place,
    drawing randomness only from ``rng`` so that a job seed makes runs repeatable.
    ``value`` is always a host (numpy) array: :func:`fill_param` copies the result to a
    Param on another device, so every device starts from the same values.
    """

    def __init__(self, conf) -> None:
        self.conf = conf

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:  # pragma: no cover
        raise NotImplementedError


def fill_param(gen: ParamGenerator, param: Param, rng: np.random.Generator) -> None:
    """Initialise ``param``'s value with ``gen``. Generators draw on the host (numpy, from
    the job's generator ``rng``), so every device gets the same initial values; the result
    is copied to the Param's device."""
    if param.device.is_host:
        gen.fill(param.value, rng)
        return
    host = np.zeros(param.shape, dtype=DTYPE)
    gen.fill(host, rng)
    param.value[...] = param.device.asarray(host)
