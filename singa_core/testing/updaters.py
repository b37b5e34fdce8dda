"""Contract checks for updater plugins: one call per updater type.

:func:`check_updater` checks, for an updater class (or registered name) and its UpdaterProto
text:

* snapshot/restore exactness: the state arrays a checkpoint saves (``<param>::<name>``),
  restored into a fresh updater through :class:`~singa_core.contracts.stub.ParamShard`, continue the
  run bit for bit (and, for an updater with state, losing it changes the result);
* clipping through :meth:`Updater.prologue`: with ``clip_low``/``clip_high`` set, an
  update equals the unclipped updater's update of the clipped gradient;
* weight decay through the documented helpers: *coupled* (L2, :meth:`Updater.prologue`
  adds ``weight_decay · wd_scale · w`` to the scaled gradient) or *decoupled*
  (:meth:`Updater.decay_weights`: ``w -= lr · lr_scale · weight_decay · wd_scale · w``
  beside the rule), each update calling the helper once;
* the update is in place, float32, and allocates nothing per step;
* its update kernel (:attr:`Updater.update_kernel`, where it names one): the CUDA code a
  GPU runs over a step's slices, compiled for the CPU (the emulated runtime), equals
  :meth:`Updater.apply` slice by slice, at a non-zero weight decay, with and without
  momentum and clipping (:func:`check_update_kernel`).

:class:`LeastSquares` and :func:`check_against_reference` compare an updater step by step
with a float64 re-statement of its rule (a closed-form test).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from google.protobuf import text_format

from singa_core.contracts.stub import ParamShard
from singa_core.contracts.updater import LRChange
from singa_core.schema import job_pb2
from singa_core.testing.layers import resolve


class TableLR(LRChange):
    """A learning rate from a table (``rates[step % len(rates)]``): a schedule for tests
    that needs no LR plugin."""

    def __init__(self, *rates: float) -> None:
        super().__init__(job_pb2.LRGenProto(base_lr=rates[0]))
        self.rates = [float(r) for r in rates]

    def __call__(self, step: int) -> float:
        return self.rates[step % len(self.rates)]


def updater_conf(text: str = "", **fields) -> job_pb2.UpdaterProto:
    """A ``singa.UpdaterProto`` from protobuf text plus keyword fields."""
    conf = text_format.Parse(text, job_pb2.UpdaterProto())
    for k, v in fields.items():
        setattr(conf, k, v)
    return conf


def _shard(updater, w):
    shard = ParamShard(updater)
    shard.put(0, w, 0, lr_scale=0.5, wd_scale=2.0, num_total=2, num_replicas=2)
    return shard


def _feed(shard, step, g):
    shard.update(0, step, g.copy())
    return shard.update(0, step, (0.5 * g).astype(np.float32))


def check_snapshot_restore(make, state_keys: set[str] | None = None) -> None:
    """Four updates, snapshot the shard's state arrays, restore them into a fresh updater
    and continue: values and state equal the uninterrupted ten updates bit for bit, while
    continuing without the history gives different values (updaters with state). ``make()``
    builds the updater; ``state_keys`` are the snapshot's array names for a param named
    "w" (default ``w::<name>`` for each of its ``state_names``)."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(10)]
    names = {0: "w"}
    if state_keys is None:
        state_keys = {f"w::{n}" for n in make().state_names}

    w_full = w0.copy()
    full = _shard(make(), w_full)
    for step, g in enumerate(grads):
        assert _feed(full, step, g) == step + 1

    w_part = w0.copy()
    part = _shard(make(), w_part)
    for step in range(4):
        _feed(part, step, grads[step])
    snap = {k: v.copy() for k, v in part.state_arrays(names).items()}
    assert set(snap) == state_keys, f"state arrays {sorted(snap)}, expected {sorted(state_keys)}"

    w_resumed = w_part.copy()
    resumed = _shard(make(), w_resumed)
    resumed.load_state_arrays(names, snap)
    w_fresh = w_part.copy()
    fresh = _shard(make(), w_fresh)  # same values, history lost
    for step in range(4, 10):
        _feed(resumed, step, grads[step])
        _feed(fresh, step, grads[step])
    np.testing.assert_array_equal(w_resumed, w_full, err_msg="a restored updater diverges")
    for k, v in full.state_arrays(names).items():
        np.testing.assert_array_equal(resumed.state_arrays(names)[k], v)
    if state_keys:
        assert not np.array_equal(w_fresh, w_full), "the updater's state has no effect"


def check_in_place_allocation_free(up) -> None:
    """After a first update (which may allocate scratch once), an update of a million
    values changes ``w`` in place and allocates less than 64 KB."""
    n = 1_000_000
    w = np.ones(n, np.float32)
    g = np.full(n, 0.5, np.float32)
    state = up.init_state(w)
    value_id = id(w)
    up.apply(0, w, g.copy(), state, scale=0.5, lr_scale=2.0, wd_scale=1.0)
    tracemalloc.start()
    try:
        up.apply(1, w, g, state, scale=0.5, lr_scale=2.0, wd_scale=1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert id(w) == value_id and w.dtype == np.float32
    assert peak < 64 * 1024, f"an update allocated {peak} bytes"


class _Calls:
    """Counts the calls of one helper method on an updater instance."""

    def __init__(self, up, name: str) -> None:
        self.count = 0
        inner = getattr(up, name)

        def wrapped(*a, **kw):
            self.count += 1
            return inner(*a, **kw)

        setattr(up, name, wrapped)


def _step_pair(up_a, up_b, w, state, step, g_a, g_b, kw_a, kw_b):
    """Apply ``up_a`` and ``up_b`` to copies of one (w, state); return both results."""
    wa, wb = w.copy(), w.copy()
    sa = {k: v.copy() for k, v in state.items()}
    sb = {k: v.copy() for k, v in state.items()}
    up_a.apply(step, wa, g_a.copy(), sa, **kw_a)
    up_b.apply(step, wb, g_b.copy(), sb, **kw_b)
    return wa, sa, wb, sb


def check_clipping(make, clips: bool = True) -> None:
    """``make(**fields)`` builds the updater with UpdaterProto fields set. With
    ``clip_low: -0.5 clip_high: 0.5`` an update equals the unclipped updater's update of
    the clipped gradient (clipping happens before scaling), and goes through
    ``prologue``. ``clips=False``: an updater documented to ignore clipping (0.3's Adam,
    AdamMax, AdaDelta) gives the same update with and without it."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal(12).astype(np.float32)
    clipped, plain = make(clip_low=-0.5, clip_high=0.5), make()
    calls = _Calls(clipped, "prologue")
    state = clipped.init_state(w)
    kw = dict(scale=0.5, lr_scale=0.8, wd_scale=1.0)
    for step in range(3):
        g = (rng.standard_normal(12) * 2).astype(np.float32)
        g_ref = np.clip(g, -0.5, 0.5) if clips else g
        wa, sa, wb, _ = _step_pair(clipped, plain, w, state, step, g, g_ref, kw, kw)
        np.testing.assert_allclose(
            wa,
            wb,
            rtol=1e-6,
            atol=1e-7,
            err_msg="clip_low/clip_high must clip the gradient before scaling (prologue)"
            if clips
            else "an updater declared not to clip changed its update when clipping was set",
        )
        w, state = wa, sa
    assert calls.count == 3, f"prologue was called {calls.count} times in 3 updates"


def check_weight_decay(make, mode: str = "coupled") -> None:
    """``make(**fields)`` builds the updater with UpdaterProto fields set. Compares, step
    by step from the same weights and state, the updater with ``weight_decay: 0.1`` and
    the one without: *coupled* decay equals feeding ``g·scale + 0.1·wd_scale·w``
    (scale 1) to the latter; *decoupled* decay equals its result minus
    ``lr·lr_scale·0.1·wd_scale·w`` (old ``w``), with the state unaffected."""
    if mode not in ("coupled", "decoupled"):
        raise ValueError(f"mode must be 'coupled' or 'decoupled', not {mode!r}")
    rng = np.random.default_rng(5)
    w = rng.standard_normal(12).astype(np.float32)
    wd, s, lr_scale, wd_scale = 0.1, 0.5, 0.8, 2.0
    decayed, plain = make(weight_decay=wd), make()
    helper = "prologue" if mode == "coupled" else "decay_weights"
    calls = _Calls(decayed, helper)
    state = decayed.init_state(w)
    kw = dict(scale=s, lr_scale=lr_scale, wd_scale=wd_scale)
    for step in range(3):
        g = rng.standard_normal(12).astype(np.float32)
        if mode == "coupled":
            g_ref = (g.astype(np.float64) * s + wd * wd_scale * w).astype(np.float32)
            kw_ref = dict(scale=1.0, lr_scale=lr_scale, wd_scale=wd_scale)
        else:
            g_ref, kw_ref = g, kw
        wa, sa, wb, sb = _step_pair(decayed, plain, w, state, step, g, g_ref, kw, kw_ref)
        if mode == "decoupled":
            wb = wb - decayed.lr(step) * lr_scale * wd * wd_scale * w
        for k in sa:
            np.testing.assert_allclose(
                sa[k],
                sb[k],
                rtol=2e-5,
                atol=1e-6,
                err_msg=f"{mode} weight decay: state {k} differs from the expected "
                + (
                    "(the decay must not enter the state)"
                    if mode == "decoupled"
                    else "(the decayed gradient goes through the rule)"
                ),
            )
        np.testing.assert_allclose(
            wa,
            wb,
            rtol=2e-5,
            atol=1e-6,
            err_msg=f"{mode} weight decay (weight_decay · wd_scale) is not applied as "
            f"documented ({'prologue' if mode == 'coupled' else 'decay_weights'})",
        )
        w, state = wa, sa
    assert calls.count == 3, f"{helper} was called {calls.count} times in 3 updates"


def check_updater(
    updater_type,
    conf: str = "",
    *,
    lr: LRChange | None = None,
    weight_decay: str = "coupled",
    clips: bool = True,
) -> None:
    """Check an updater type's contract in one call. ``updater_type``: the class or its
    registered name; ``conf``: UpdaterProto text (your extension as ``[pkg.ext] {...}``);
    ``lr``: its learning-rate change (default a table 0.05, 0.04, 0.03);
    ``weight_decay``: ``"coupled"`` or ``"decoupled"``; ``clips=False`` for an updater
    documented to ignore ``clip_low``/``clip_high``."""
    cls = resolve("updater", updater_type)
    lr = lr or TableLR(0.05, 0.04, 0.03)

    def make(**fields):
        return cls(updater_conf(conf, **fields), lr)

    check_snapshot_restore(make)
    check_clipping(make, clips)
    check_weight_decay(make, weight_decay)
    check_in_place_allocation_free(make(weight_decay=0.01, clip_low=-1.0, clip_high=1.0))
    check_update_kernel(make)


#: the settings :func:`check_update_kernel` runs an update kernel at
KERNEL_SETTINGS = (
    {"weight_decay": 0.5},
    {"weight_decay": 0.5, "momentum": 0.9},
    {"weight_decay": 0.1, "momentum": 0.9, "clip_low": -0.6, "clip_high": 0.6},
)


def check_update_kernel(make, tol: float = 3e-6) -> None:
    """``make(**fields)`` builds the updater. Where it names an update kernel, that
    kernel's CUDA code (run on the CPU by the emulated runtime; skipped without a C++
    compiler) gives what :meth:`Updater.apply` gives slice by slice, over four slices of
    different sizes, gradient scales, learning-rate and weight-decay multipliers, for three
    steps, at each of :data:`KERNEL_SETTINGS`: a rule whose kernel adds coupled decay
    where :meth:`apply` decouples it (or forgets a state) fails here."""
    from singa_core.contracts.kernels import cuda_code
    from singa_core.contracts.updater import UpdateItem
    from singa_core.testing.kernels import _emulated

    if make().update_kernel is None:
        return
    rt = _emulated()
    rng = np.random.default_rng(11)
    shapes = [(7, 3), (5,), (300,), (1,)]
    for fields in KERNEL_SETTINGS:
        up = make(**fields)
        run = cuda_code(up.update_kernel, rt)
        items = []
        for k, shape in enumerate(shapes):
            w = rng.standard_normal(shape).astype(np.float32)
            state = {n: np.abs(rng.standard_normal(shape)).astype(np.float32)
                     for n in up.init_state(w)}  # fmt: skip
            items.append(UpdateItem(w, w, state, (1.0, 0.5)[k % 2], (1.0, 2.0, 0.5)[k % 3],
                                    (1.0, 0.0, 2.0)[k % 3]))  # fmt: skip
        for step in range(3):
            grads = [rng.standard_normal(it.value.shape).astype(np.float32) * 2 for it in items]
            ref = [_item_copy(it, g) for it, g in zip(items, grads, strict=True)]
            got = [_item_copy(it, g) for it, g in zip(items, grads, strict=True)]
            for it in ref:
                up.apply(step, it.value, it.grad, it.state, scale=it.scale,
                         lr_scale=it.lr_scale, wd_scale=it.wd_scale)  # fmt: skip
            run(up, step, got)
            for i, (a, b) in enumerate(zip(ref, got, strict=True)):
                where = f"{up.update_kernel} at {fields}, step {step}, slice {i}"
                np.testing.assert_allclose(
                    b.value, a.value, rtol=tol, atol=tol,
                    err_msg=f"{where}: the kernel's value differs from apply()'s",
                )  # fmt: skip
                for name in a.state:
                    np.testing.assert_allclose(
                        b.state[name], a.state[name], rtol=tol, atol=tol,
                        err_msg=f"{where}: the kernel's state {name!r} differs from apply()'s",
                    )  # fmt: skip
            items = ref


def _item_copy(it, grad):
    from singa_core.contracts.updater import UpdateItem

    return UpdateItem(it.value.copy(), grad.copy(), {k: v.copy() for k, v in it.state.items()},
                      it.scale, it.lr_scale, it.wd_scale)  # fmt: skip


class LeastSquares:
    """``0.5·||A w − b||²`` on a fixed 8×3 problem; :meth:`grad` is summed over 2
    "replicas", so the updaters are run with ``scale = 1/2``."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((8, 3))
        self.b = rng.standard_normal(8)
        self.w0 = np.array([1.0, -1.0, 0.5])

    def grad(self, w):
        return 2 * self.a.T @ (self.a @ w - self.b)

    def loss(self, w) -> float:
        return 0.5 * float(np.sum((self.a @ w - self.b) ** 2))


def check_against_reference(up, problem: LeastSquares, ref, steps: int = 25) -> None:
    """Run ``up`` in float32 from ``problem.w0`` with scale 1/2, lr_scale 0.8 and wd_scale 2
    and compare every step with the float64 reference ``ref``; the loss must fall."""
    w = problem.w0.astype(np.float32)
    state = up.init_state(w)
    for step in range(steps):
        g = problem.grad(w.astype(np.float64)).astype(np.float32)
        up.apply(step, w, g, state, scale=0.5, lr_scale=0.8, wd_scale=2.0)
        np.testing.assert_allclose(w, ref[step], rtol=1e-4, atol=1e-5)
    assert problem.loss(w.astype(np.float64)) < problem.loss(problem.w0)
