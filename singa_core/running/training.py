"""The training loop of one worker (SINGA 0.3 §5.2), engine-independent.

For ``step`` from the start step while ``step < train_steps``: validate, test and
checkpoint when their ``_freq``/``_after`` say so (all fire at step 0 when ``_after`` is 0,
as in SINGA), train one batch, display the training metrics, ``step += 1``. After the loop
the validation and test nets are evaluated once more at ``train_steps`` (a singa addition,
docs/compat.md) and a final checkpoint is written there. A checkpoint ``step<S>`` always
holds the parameters after exactly S updates.

The first Ctrl-C finishes the current step, writes a checkpoint and stops (resume with
``--resume``); a second one stops at once. A Ctrl-C during a validation or test pass ends
the pass after its current batch: the pass is dropped (no metrics; its data cursors are
rewound, so a resumed run repeats it exactly) and the job stops before the step's training,
with a checkpoint of the steps finished.

After every training step a :class:`~singa_core.running.numeric.NumericGuard` checks the learning
rate, the layers' metrics, gradients and Param values; a NaN or infinity raises
:class:`~singa_core.running.numeric.NonFiniteError` (exit 3) and no checkpoint is written after it.

The engine's ``checkpoint(step, evaluated=[...])`` callable writes checkpoint ``step`` and
records in its state which evaluations (``"validation"``, ``"test"``) already ran and were
logged at that step; a run resumed from it gets them back as ``run(done_evaluations=...)``
and does not repeat them, so its output continues the interrupted run's exactly.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import numpy as np

from singa_core.contracts import capture
from singa_core.contracts.layer import kTest, kVal, pop_metrics_of
from singa_core.contracts.names import base_layer_name, split_replica_name
from singa_core.contracts.stub import ParamStub
from singa_core.running.numeric import NonFiniteError, NumericGuard
from singa_core.running.out_of_memory import out_of_memory_error
from singa_core.running.reporting import stop_note
from singa_core.running.tensorboard import GradientHistograms, param_histograms


class EvaluationStopped(Exception):
    """A stop request cut an evaluation pass short (internal to :class:`TrainingLoop`)."""


def quiet_float_errors():
    """numpy's floating-point warnings off for a pass over a net: an overflow or a NaN in a
    layer printed a raw ``RuntimeWarning`` with numpy's file and source line. The numeric
    guard (running/numeric.py) checks every output, gradient, Param and loss after each
    step and reports a divergence once, located at the first layer or Param that went
    non-finite; nothing is hidden that it does not say."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def fires(step: int, freq: int, after: int) -> bool:
    """SINGA's ``XxxNow``: freq > 0, step >= after and (step - after) % freq == 0."""
    return freq > 0 and step >= after and (step - after) % freq == 0


def merge_metrics(per_layer: dict[str, dict[str, float]]) -> dict[str, float]:
    """Combine layers' metrics into one dict; names used by two layers get a prefix."""
    counts: dict[str, int] = {}
    for metrics in per_layer.values():
        for k in metrics:
            counts[k] = counts.get(k, 0) + 1
    out = {}
    for lname, metrics in per_layer.items():
        for k, v in metrics.items():
            out[k if counts[k] == 1 else f"{lname}/{k}"] = v
    return out


def pop_net_metrics(net) -> dict[str, float]:
    """Every layer's metrics since the last call. The unrolled copies of a layer ("0#loss",
    "1#loss", …) and its replicas in the partitions of a group ("loss@0", "loss@1") report as
    that layer, averaged over them: the char-rnn loss is per character (0.3 displayed the
    sum over the copies; see docs/compat.md)."""
    sums: dict[str, dict[str, float]] = {}
    copies: dict[str, dict[str, int]] = {}
    for layer, metrics in zip(net.layers, pop_metrics_of(net.layers), strict=True):
        if not metrics:
            continue
        name = split_replica_name(base_layer_name(layer.name))[1]
        acc, n = sums.setdefault(name, {}), copies.setdefault(name, {})
        for k, v in metrics.items():
            acc[k] = acc.get(k, 0.0) + v
            n[k] = n.get(k, 0) + 1
    return merge_metrics(
        {name: {k: v / copies[name][k] for k, v in acc.items()} for name, acc in sums.items()}
    )


def close_layers(net) -> None:
    """Let every layer publish its output files (Layer.close)."""
    for layer in net.layers:
        layer.close()


class TrainingLoop:
    def __init__(
        self,
        job,
        *,
        worker,
        stub: ParamStub,
        train_net,
        nets: dict[int, object],
        checkpoint: Callable[[int], str] | None,
        reporter,
        lr: Callable[[int], float] | None = None,
        is_display_worker: bool = True,
        step_runner: Callable[[int, ParamStub], None] | None = None,
    ) -> None:
        self.job = job
        #: runs one training step (train_one_batch, then the stub's flush); an engine may
        #: give one that replays the step's device work (plugins/engines/graphed_step.py)
        self.step_runner = step_runner or self._train_step
        self.worker = worker
        self.stub = stub
        self.train_net = train_net
        self.nets = nets
        self.checkpoint = checkpoint
        self.reporter = reporter
        self.lr = lr
        self.is_display_worker = is_display_worker
        self.last_metrics: dict[str, dict[str, float]] = {}
        self._stop_requested = False
        self.stop_signal: int | None = None
        self.guard = NumericGuard(train_net, lr)
        # Param and gradient histograms at display steps (singa_core.running.tensorboard), when the
        # reporter asks for them
        self.param_histograms = getattr(reporter, "param_histograms", False) is True

    def evaluate(self, phase: int, steps: int, step: int | None = None) -> dict[str, float]:
        with quiet_float_errors():
            return self._evaluate(phase, steps, step)

    def _evaluate(self, phase: int, steps: int, step: int | None = None) -> dict[str, float]:
        net = self.nets[phase]
        t0 = time.perf_counter()
        self.reporter.begin("test" if phase == kTest else "validation")
        self.stub.collect_all(self.train_net.owner_params)
        pop_net_metrics(net)  # drop anything left over
        self.worker.start_evaluation(phase, net)
        # the layers' cursors and random states (a store's random_skip draws from the
        # latter), to rewind a pass that a stop cuts short
        before = {
            layer.name: (layer.state_dict(), layer.ctx.rng.bit_generator.state)
            for layer in net.layers
        }
        for _ in range(steps):
            if self._stop_requested:  # Ctrl-C / SIGTERM: end the pass after its last batch
                for layer in net.layers:  # as if it had not started: a resume repeats it
                    state, rng = before[layer.name]
                    layer.load_state_dict(state)
                    layer.ctx.rng.bit_generator.state = rng
                pop_net_metrics(net)
                raise EvaluationStopped
            self.worker.test_one_batch(phase, net)
        metrics = pop_net_metrics(net)
        close_layers(net)
        name = "Test" if phase == kTest else "Validation"
        self.reporter.evaluated(name, step, time.perf_counter() - t0)
        self.last_metrics[name.lower()] = metrics
        if step is not None:
            self.reporter.metrics(name, step, metrics)
        return metrics

    def _train_step(self, step: int, stub: ParamStub) -> None:
        self.worker.train_one_batch(step, self.train_net, stub)
        self.stub.flush()

    def run(
        self, start_step: int, *, resumed: bool = False, done_evaluations=()
    ) -> tuple[int, str | None, bool]:
        """Train from ``start_step``; returns (final step, last checkpoint, interrupted).
        ``done_evaluations``: the evaluations ("validation", "test") the interrupted run
        already logged at ``start_step`` (from the checkpoint), not run again."""
        with quiet_float_errors(), capture.step_scope():  # this run's numbers of a step
            return self._run(start_step, resumed=resumed, done_evaluations=done_evaluations)

    def _run(
        self, start_step: int, *, resumed: bool = False, done_evaluations=()
    ) -> tuple[int, str | None, bool]:
        job = self.job
        step = start_step
        last_ckpt = None
        skip = set(done_evaluations) if resumed else set()
        # the handlers before the start record: whoever sees the run started (a console
        # reading the metrics file) may stop it at once, and gets its step and checkpoint
        prev_handler = self._install_sigint()
        try:
            self.reporter.start(start_step, job.train_steps, seed=int(job.seed), resumed=resumed)
        except BaseException:
            self._restore_sigint(prev_handler)
            raise
        try:
            if step < job.train_steps:
                self.guard.check_start(step)
            while step < job.train_steps:
                capture.prepare_step(step)  # the step's numbers in device memory
                evaluated = []
                for phase, name, freq, after, steps in (
                    (kVal, "validation", job.validate_freq, job.validate_after, job.validate_steps),
                    (kTest, "test", job.test_freq, job.test_after, job.test_steps),
                ):
                    if phase in self.nets and fires(step, freq, after):
                        if not (step == start_step and name in skip):
                            self.evaluate(phase, steps, step)
                        evaluated.append(name)
                if (
                    self.checkpoint
                    and fires(step, job.checkpoint_freq, job.checkpoint_after)
                    and not (resumed and step == start_step)
                ):
                    last_ckpt = self._checkpoint(step, evaluated)
                shown = self.is_display_worker and fires(step, job.disp_freq, job.disp_after)
                stub = self.stub
                if shown and self.param_histograms:
                    stub = GradientHistograms(self.stub)  # gradients as handed to the servers
                t0 = time.perf_counter()
                try:
                    self.step_runner(step, stub)
                except MemoryError as exc:  # a GPU's (or the host's) memory ran out
                    raise out_of_memory_error(exc, step) from None
                self.reporter.step_done(step, time.perf_counter() - t0)
                try:
                    self.guard.check(step)
                    if shown:
                        self.guard.settle()  # a device's check, read with the metrics
                    bad = None
                except NonFiniteError as exc:
                    bad = exc  # raised after this step's display line (loss = nan)
                if shown:
                    metrics = pop_net_metrics(self.train_net)
                    if self.lr is not None:
                        metrics["lr"] = self.lr(step)
                    self.last_metrics["train"] = metrics
                    self.reporter.metrics("Train", step, metrics)
                    if stub is not self.stub:
                        values = param_histograms(self.train_net.owner_params, grads=False)
                        self.reporter.histograms(step, {**values, **stub.hists})
                if bad is not None:
                    raise bad
                step += 1
                if self._stop_requested:
                    break
            self.guard.settle()
            interrupted = step < job.train_steps
            evaluated = []
            if not interrupted:
                evaluated = self._final_evaluations(step, start_step, skip)
            if self.checkpoint:
                last_ckpt = self._checkpoint(step, evaluated)
            # an interruption is told once, by whoever ran the job (the CLI's last line)
            return step, last_ckpt, interrupted
        except EvaluationStopped:
            # stopped during an evaluation of `step`, before its training: checkpoint the
            # `step` steps finished, with the evaluations of `step` that completed
            if self.checkpoint:
                self.stub.collect_all(self.train_net.owner_params)
                last_ckpt = self.checkpoint(step, evaluated=list(evaluated))
            return step, last_ckpt, True
        finally:
            for net in {id(n): n for n in (self.train_net, *self.nets.values())}.values():
                close_layers(net)
            self._restore_sigint(prev_handler)
            self.reporter.finish()

    def _final_evaluations(self, step: int, start_step: int, skip) -> list[str]:
        """The validation and test nets once more at the last step (a singa addition: SINGA
        0.3 stopped without), so a run ends with the metrics of the Params it leaves; a
        resumed run that finds them already logged at that step does not repeat them."""
        job, evaluated = self.job, []
        for phase, name, steps in (
            (kVal, "validation", job.validate_steps),
            (kTest, "test", job.test_steps),
        ):
            if phase in self.nets and steps > 0:
                if not (step == start_step and name in skip):
                    self.evaluate(phase, steps, step)
                evaluated.append(name)
        return evaluated

    def _checkpoint(self, step: int, evaluated) -> str | None:
        self.guard.settle()  # never a checkpoint after a device's numbers went non-finite
        t0 = time.perf_counter()
        self.reporter.begin("checkpoint")
        self.stub.collect_all(self.train_net.owner_params)
        path = self.checkpoint(step, evaluated=evaluated)
        self.reporter.checkpointed(step, path, time.perf_counter() - t0)
        return path

    def request_stop(self, signum: int | None = None) -> None:
        """Stop after the current step with a checkpoint, as the first Ctrl-C does (for
        engines whose workers learn of a signal from elsewhere, e.g. a launcher process)."""
        self._stop_requested = True
        if signum is not None:
            self.stop_signal = signum

    # -- Ctrl-C: finish the step, checkpoint, stop -------------------------------------------
    def _install_sigint(self):
        """SIGINT (Ctrl-C) and SIGTERM (schedulers, preemption) stop after the current
        step with a checkpoint; a second signal stops at once."""
        try:

            def handler(signum, frame):
                if self._stop_requested:
                    raise KeyboardInterrupt
                self._stop_requested = True
                self.stop_signal = signum
                self.reporter.note(stop_note())

            return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread
            return None

    @staticmethod
    def _restore_sigint(prev) -> None:
        for sig, handler in (prev or {}).items():
            try:
                signal.signal(sig, handler)
            except ValueError:
                pass
