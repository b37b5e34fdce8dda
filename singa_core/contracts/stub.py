"""The worker/server seam (SINGA 0.3 §5.2-5.5): ParamStub and the server-side ParamShard.

Workers never apply updates themselves. They call, per Param:

* ``collect(p)``: block until ``p`` has a value newer than the last gradient it sent;
* ``update(step, p)``: hand ``p.grad`` to the server side.

The server side (:class:`ParamShard`) owns the authoritative values of the owner Params
(or slices of them), their versions and the updater state. It waits until all
``num_total`` contributions of a Param have arrived, sums them, and applies the updater
with ``scale = 1/num_replicas``. The built-in engines pass ``num_replicas = 1``: a group's
contributions are summed (the loss layers of batch replicas already scale by 1/n, and
shares through ``share_from`` are summed — see docs/compat.md). Engines decide
where stubs and shards live and how values and gradients move between them.

Entries of non-learnable Params (``Param.learnable`` False, e.g. batch-norm running
statistics, written by their layer) take contributions like any other, but the updater is
never applied to them: their version advances without the value being touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from singa_core.contracts.device import array_module, to_host
from singa_core.contracts.param import Param
from singa_core.contracts.updater import UpdateItem, Updater


class ParamStub:
    """Worker-side contract implemented by every engine."""

    def collect(self, param: Param) -> None:  # pragma: no cover
        raise NotImplementedError

    def update(self, step: int, param: Param) -> None:  # pragma: no cover
        raise NotImplementedError

    def collect_all(self, params) -> None:
        for p in params:
            self.collect(p)

    def flush(self) -> None:
        """Make every update sent so far take effect (the training loop calls it after each
        step; a stub whose server holds updates back to apply them together applies them
        here). The default has nothing held."""


@dataclass
class ShardEntry:
    """Server-side record of one owner Param (or one slice of it)."""

    value: np.ndarray  # authoritative values (a view into the server's memory)
    lr_scale: float
    wd_scale: float
    num_total: int  # contributions expected per update
    num_replicas: int  # the summed gradient is divided by this (1: plain sum)
    version: int = 0
    state: dict[str, np.ndarray] = field(default_factory=dict)
    received: int = 0  # contributions received towards the next update
    grad_sum: np.ndarray | None = None  # aggregation buffer (num_total > 1)
    learnable: bool = True  # False: count contributions, never apply the updater
    summed: bool = False  # grad_sum holds this update's contributions so far


class FoldedUpdate:
    """A server's leave for one Param's update to be applied inside the Param's
    gradient GEMM (:meth:`Param.set_grad_product`), for the step it is armed for.

    The engine arms it with the step being trained (:meth:`arm`) and disarms it after;
    :meth:`take` gives that step's coefficients from the updater's
    :meth:`~singa_core.updater.Updater.fold`, at most once per step, and records that the
    update was applied, so the stub's ``update`` then only advances the version
    (:meth:`ParamShard.folded`). Unarmed (a trial step, a step whose gradients are looked
    at), the gradient is written to ``grad`` and updated as usual."""

    def __init__(self, shard: ParamShard, key: int) -> None:
        self.shard = shard
        self.key = key
        self.step: int | None = None
        self.applied = False

    def arm(self, step: int) -> None:
        self.step, self.applied = step, False

    def disarm(self) -> None:
        self.step = None

    def take(self, param: Param) -> tuple[float, float] | None:
        if self.step is None or self.applied:
            return None
        e = self.shard.entries[self.key]
        coefficients = self.shard.updater.fold(
            self.step, scale=1.0 / e.num_replicas, lr_scale=e.lr_scale, wd_scale=e.wd_scale
        )
        self.applied = coefficients is not None
        return coefficients


def fold_updates(shard: ParamShard, params) -> list[FoldedUpdate]:
    """Give every owner Param of ``params`` whose update ``shard`` may fold
    (:meth:`ParamShard.foldable`; used by itself alone, its own gradient, its values on
    the host) a :class:`FoldedUpdate`; returns them (to arm for each step)."""
    uses: dict[int, list[Param]] = {}
    for p in params:
        uses.setdefault(p.owner.id, []).append(p)
    folds = []
    for key, ps in uses.items():
        owner = ps[0].owner
        if (
            len(ps) == 1
            and owner.grad_owner is owner
            and not owner.is_mirror
            and isinstance(owner.value, np.ndarray)
            and shard.foldable(key)
        ):
            owner.fold = FoldedUpdate(shard, key)
            folds.append(owner.fold)
    return folds


def hand_over(shard: ParamShard, step: int, param: Param) -> int | None:
    """A worker's ``update(step, param)`` on a server in this process: a folded update is
    only counted (:meth:`ParamShard.folded`), a zero gradient (:meth:`Param.zero_grad`)
    counted unread, any other gradient added (:meth:`ParamShard.update`). Returns the new
    version, or None."""
    owner = param.owner
    if owner.fold is not None and owner.fold.applied:  # updated inside its gradient's GEMM
        owner.fold.applied = False
        return shard.folded(owner.id)
    grad = None if param.grad_zero else param.grad
    param.grad_kept_zero, param.grad_zero = param.grad_zero, False
    if grad is not None and array_module(grad) is not array_module(owner.value):
        grad = owner.device.asarray(to_host(grad))  # a replica on another device
    return shard.update(owner.id, step, grad)


class ParamShard:
    """Applies the updater to the Params (slices) it owns; engine-independent.

    With ``batch_updates`` (a shard whose values live on a GPU) a slice whose
    contributions are complete is not updated at once but held until :meth:`flush`, which
    hands every held slice to :meth:`Updater.apply_many` together (one launch for a whole
    step's Params); :meth:`update` then returns None and :meth:`flush` the new versions.
    """

    def __init__(self, updater: Updater, *, batch_updates: bool = False) -> None:
        self.updater = updater
        self.entries: dict[int, ShardEntry] = {}
        self.batch_updates = batch_updates
        #: held slices, in the order they became complete
        self.pending: dict[int, UpdateItem] = {}
        self._step = 0

    def put(
        self,
        key: int,
        value: np.ndarray,
        version: int,
        *,
        lr_scale: float,
        wd_scale: float,
        num_total: int = 1,
        num_replicas: int = 1,
        learnable: bool = True,
    ) -> None:
        self.entries[key] = ShardEntry(
            value=value,
            lr_scale=lr_scale,
            wd_scale=wd_scale,
            num_total=num_total,
            num_replicas=num_replicas,
            version=version,
            state=self.updater.init_state(value) if learnable else {},
            grad_sum=np.zeros_like(value) if num_total > 1 and learnable else None,
            learnable=learnable,
        )

    def put_net(self, net) -> None:
        """Hold every owner Param of ``net`` with its value array shared (no copy), each
        expecting ``net.contributions()`` gradients per update (one process, one group)."""
        counts = net.contributions()
        for p in net.owner_params:
            self.put(
                p.id,
                p.value,
                p.version,
                lr_scale=p.lr_scale,
                wd_scale=p.wd_scale,
                num_total=counts[p.id],
                learnable=p.learnable,
            )

    def update(self, key: int, step: int, grad: np.ndarray | None) -> int | None:
        """Add one contribution; apply the update when all have arrived.

        The shard may use (and overwrite) ``grad`` as its scratch buffer: a worker hands a
        gradient over and recomputes it next step. ``grad`` None is a contribution known to
        be zero (:meth:`Param.zero_grad`): counted, never read. Returns the new version when
        the update was applied, else None.
        """
        e = self.entries[key]
        if not e.learnable:
            e.received += 1
            if e.received < e.num_total:
                return None
            e.received = 0
            e.version += 1
            return e.version
        if e.num_total == 1:
            total = grad if grad is not None else np.zeros_like(e.value)  # nothing to sum
        else:
            last = e.received + 1 == e.num_total
            if grad is not None and e.summed:
                e.grad_sum += grad
            elif grad is not None and not last:
                np.copyto(e.grad_sum, grad)
                e.summed = True
            e.received += 1
            if not last:
                return None
            e.received = 0
            if e.summed:
                total = e.grad_sum
            elif grad is not None:  # the only contribution that is not zero: as it is
                total = grad
            else:  # every contribution was zero
                e.grad_sum.fill(0)
                total = e.grad_sum
            e.summed = False
        if self.batch_updates:
            self._step = step
            self.pending[key] = UpdateItem(
                e.value, total, e.state, 1.0 / e.num_replicas, e.lr_scale, e.wd_scale
            )
            return None
        self.updater.apply(
            step,
            e.value,
            total,
            e.state,
            scale=1.0 / e.num_replicas,
            lr_scale=e.lr_scale,
            wd_scale=e.wd_scale,
        )
        e.version += 1
        return e.version

    def foldable(self, key: int) -> bool:
        """Whether the update of ``key`` may be folded into its gradient's GEMM
        (:class:`FoldedUpdate`): a learnable slice with one contribution per update, updated
        at once (not held for a device's batch), by a rule of the form ``value ← β·value +
        α·grad`` (:meth:`Updater.fold`)."""
        e = self.entries[key]
        return (
            e.learnable
            and e.num_total == 1
            and not self.batch_updates
            and isinstance(e.value, np.ndarray)
            and self.updater.fold(0, lr_scale=e.lr_scale, wd_scale=e.wd_scale) is not None
        )

    def folded(self, key: int) -> int:
        """The update of ``key`` was applied inside its gradient's GEMM: count it (the new
        version)."""
        e = self.entries[key]
        e.version += 1
        return e.version

    def flush(self) -> dict[int, int]:
        """Apply the held updates (``batch_updates``) in one :meth:`Updater.apply_many`;
        returns the new version of each slice updated."""
        if not self.pending:
            return {}
        held, self.pending = self.pending, {}
        self.updater.apply_many(self._step, list(held.values()))
        out = {}
        for key in held:
            e = self.entries[key]
            e.version += 1
            out[key] = e.version
        return out

    def learnable_keys(self) -> int:
        """How many slices the updater runs on (a step updates each once)."""
        return sum(1 for e in self.entries.values() if e.learnable)

    # -- checkpointing of updater history ------------------------------------------------
    def state_arrays(self, names: dict[int, str]) -> dict[str, np.ndarray]:
        out = {}
        for key, e in self.entries.items():
            for sname, arr in e.state.items():
                out[f"{names[key]}::{sname}"] = arr
        return out

    def load_state_arrays(self, names: dict[int, str], arrays: dict[str, np.ndarray]) -> None:
        for key, e in self.entries.items():
            for sname, arr in e.state.items():
                k = f"{names[key]}::{sname}"
                if k in arrays:
                    arr[...] = array_module(arr).asarray(arrays[k])  # to the slice's device
