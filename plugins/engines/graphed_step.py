"""Training steps whose device work is captured once and replayed (the in-process engine's
``--engine-option graphs=on``): a CUDA graph's way, checked on the stand-in.

The first step of a run is eager (it allocates what the step needs, uploads the kernels'
tables). The next one is captured while it runs (:func:`singa_core.capture.capturing`):
every launch, GEMM and copy into an existing device array becomes a node. Each later step
is its host part (:meth:`Worker.host_part`: the input layers read the next batch into the
host buffers the graph's copy nodes read), then the replay; the training loop has brought
the step's numbers (the learning rate, the step of the draws) to the step in device memory
before (:func:`~singa_core.capture.prepare_step`). What the step's Python did besides
launching is done again by hand: the Params' versions advance
(:meth:`InProcessStub.replayed`) and the layers' metric counts grow by what the captured
step added.

Display, test and checkpoint steps stay outside the graph: metrics are read, evaluations
run and checkpoints are written between replays, on the same arrays. A display step that
records gradient histograms runs eagerly. A step that cannot be captured (a layer reads
the device, allocates, synchronises) stops the run with the call and the layer named.
"""

from __future__ import annotations

from singa_core import capture
from singa_core.layer import add_metric_counts, metric_counts

#: eager steps before the capture (the first allocates and uploads what the step needs)
WARMUP_STEPS = 1


class GraphedStep:
    """The step runner of a TrainingLoop (see the module doc)."""

    def __init__(self, worker, net, stub, reporter) -> None:
        self.worker, self.net, self.stub, self.reporter = worker, net, stub, reporter
        self.graph: capture.Graph | None = None
        self.eager_steps = 0
        self.counts_added: list[tuple] = []  # (layer, {metric: batches}) of one step

    def __call__(self, step: int, stub) -> None:
        if stub is not self.stub:  # a display step taking gradient histograms
            self._eager(step, stub)
        elif self.graph is not None:
            self._replay(step)
        elif self.eager_steps < WARMUP_STEPS:
            self._eager(step, stub)
            self.eager_steps += 1
        else:
            self._capture(step)

    def _eager(self, step: int, stub) -> None:
        self.worker.train_one_batch(step, self.net, stub)
        self.stub.flush()

    def _capture(self, step: int) -> None:
        # (the training loop brought the step's numbers to this step before calling)
        before = [(layer, metric_counts(layer)) for layer in self.net.layers]
        with capture.capturing() as graph:
            self._eager(step, self.stub)
        self.counts_added = []
        for layer, counts in before:
            after = metric_counts(layer)
            grown = {k: n - counts.get(k, 0) for k, n in after.items() if n != counts.get(k, 0)}
            if grown:
                self.counts_added.append((layer, grown))
        self.graph = graph
        copies = sum(1 for n in graph.nodes if n.kind == "to_device")
        self.reporter.note(
            f"graphs: step {step} captured; each later step replays its {graph.launches} "
            f"launches and {copies} copies"
        )

    def _replay(self, step: int) -> None:
        self.worker.host_part(step, self.net)
        self.graph.replay()
        self.stub.replayed()
        for layer, grown in self.counts_added:
            add_metric_counts(layer, grown)
