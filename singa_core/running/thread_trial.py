"""Choosing the BLAS thread count by timing, for the commands that do not train.

`singa train` times its first training steps at 1 thread and at every usable CPU and keeps
the faster (:func:`singa_core.blas.faster_thread_count`; on a machine shared with other
work, 1 thread is often much faster). `singa test`, `singa time` and `singa predict` choose
the same way, timing what they run: `singa time` its own training steps (before its
warm-up: :func:`singa_core.commands.timing.time_training_step`), `singa test` its worker's
test passes (:func:`choose_for_net`), `singa predict` the trained model's forward pass on
its input (:func:`choose_for_model`). The test passes change nothing: the input layers'
cursors are rewound, and the other layers' states, random states and metrics and the
values of the Params layers write themselves are put back afterwards.

The choice is made only when nothing sets the count (job.conf's ``num_openblas_threads``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``) and more than one CPU
is usable.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from singa_core.contracts.blas import (
    blas_threads_for,
    blas_threads_set_by,
    faster_thread_count,
    set_blas_threads,
)
from singa_core.contracts.layer import kForward
from singa_core.contracts.resources import usable_cpus

#: timed runs at each count (alternating 1, N, 1, N, ...), at most
TRIAL_PAIRS = 4
#: the trial stops after this long, whatever it has
TRIAL_SECONDS = 3.0
#: a trial step longer than both this many seconds and STEP_BOUND_FACTOR times the first
#: timed step (1 thread) ends the trial at once, with the steps timed so far: on a busy
#: machine one N-thread step took 36.8 s where 1 thread took 0.06 s (issue 38)
STEP_BOUND_SECONDS = 2.0
STEP_BOUND_FACTOR = 3.0


def step_bound(first: float) -> float:
    """The longest a trial step may take, given the first timed step's ``first`` seconds."""
    return max(STEP_BOUND_SECONDS, STEP_BOUND_FACTOR * first)


def trial_times(run_once: Callable[[], None], cpus: int, clock=time.perf_counter):
    """Run ``run_once`` at 1 and ``cpus`` threads, alternating, after one warm-up run at 1:
    at most :data:`TRIAL_PAIRS` pairs, no new pair after :data:`TRIAL_SECONDS`, none once
    ``cpus`` clearly loses, and nothing more after a step over :func:`step_bound`. Returns
    ({threads: [seconds, ...]}, ended): ``ended`` is "" or the clause saying why the trial
    ended early."""
    times: dict[int, list[float]] = {1: [], cpus: []}
    set_blas_threads(1)
    run_once()  # warm-up: buffers, pages
    start = clock()
    while len(times[1]) < TRIAL_PAIRS:
        for n in (1, cpus):
            set_blas_threads(n)
            t0 = clock()
            run_once()
            took = clock() - t0
            times[n].append(took)
            bound = step_bound(times[1][0])
            if took > bound:
                return times, (
                    f"; the trial ended early: a {n}-thread step took {took:.1f} s, over "
                    f"its bound of {bound:.1f} s (the larger of {STEP_BOUND_SECONDS:.0f} s "
                    f"and {STEP_BOUND_FACTOR:.0f}x the first step)"
                )
        if clock() - start > TRIAL_SECONDS:
            break
        if min(times[cpus]) > 2 * max(times[1]):  # N clearly loses: a busy machine
            break
    return times, ""


def timed_choice(run_once: Callable[[], None], cpus: int) -> tuple[int, str]:
    """Run ``run_once`` at 1 and ``cpus`` threads (:func:`trial_times`) and keep the faster
    count (:func:`faster_thread_count`); returns (count, why)."""
    times, ended = trial_times(run_once, cpus)
    n, why = faster_thread_count(times)
    set_blas_threads(n)
    return n, f"automatic: {why}{ended}"


def needs_choice(job, cpus: int | None = None) -> bool:
    """Whether singa chooses the count here: nothing sets it and several CPUs are usable."""
    return blas_threads_set_by(job) is None and (cpus or usable_cpus()) > 1


def pin_the_set_count(job) -> int:
    """Pin the count job.conf or the environment sets (where :func:`needs_choice` is False),
    as the engines pin it: on OpenBLAS with numba its GEMMs are then cut over singa's pool
    and the compiled passes run on it too; returns the count."""
    n = blas_threads_for(job, usable_cpus())
    set_blas_threads(n)
    return n


def choose_for_net(net, phase: int, worker=None) -> tuple[int, str]:
    """Time test passes of ``net`` and pin the faster thread count; the net is left as it
    was (layer states and cursors, random states, metrics, Params written by layers).

    With ``worker`` a pass is the worker's own ``test_one_batch`` (what the command runs,
    whatever the algorithm: a contrastive-divergence net computes nothing in a plain forward
    pass); its batches are read again afterwards (the cursors are rewound). Without, a pass
    is every layer's ``forward(phase | kForward)``, the input layers left out (nothing read)."""
    from singa_core.running.checkpoint import layer_states, restore_layer_states
    from singa_core.running.training import pop_net_metrics

    before = layer_states({phase: net})
    written = [(p, p.value.copy()) for p in net.owner_params if not p.learnable]

    computing = [layer for layer in net.layers if net.srclayers(layer)]

    def once() -> None:
        if worker is not None:
            worker.test_one_batch(phase, net)
            return
        for layer in computing:
            layer.forward(phase | kForward, net.srclayers(layer))

    try:
        return timed_choice(once, usable_cpus())
    finally:
        restore_layer_states({phase: net}, before)
        for p, value in written:
            p.value[...] = value
        pop_net_metrics(net)


def choose_for_model(model, x) -> tuple[int, str]:
    """Time ``model``'s forward pass on its first pass of ``x`` (a trained model's deploy
    net) and pin the faster thread count; a recurrent model's state is reset afterwards (a
    command's model starts every sequence over)."""
    import numpy as np

    rows = min(len(x), model.batch)
    size = model.pass_rows(rows)  # the pass predict will run (fewer rows: a smaller net)
    chunk = np.zeros((size, *model.sample_shape), dtype=np.float32)
    chunk[:rows] = x[:rows]
    net = model._net_of(size)
    try:
        return timed_choice(lambda: model._forward(chunk, net), usable_cpus())
    finally:
        if model.carriers:
            model.reset_state()
