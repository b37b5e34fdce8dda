"""kBP: back-propagation (SINGA 0.3 §5.3 BPWorker).

Forward over the layers in topological order, collecting each layer's Params before use;
backward in reverse order, handing each layer's Param gradients to the servers right after
the layer's backward (so communication overlaps the rest of back-propagation).
TestOneBatch is a forward pass in the given phase.
"""

from __future__ import annotations

from singa_core.layer import kBackward, kForward, kTrain
from singa_core.worker import Worker


class BPWorker(Worker):
    type_names = ("kBP",)

    def train_one_batch(self, step: int, net, stub) -> None:
        fwd, bwd = kTrain | kForward, kTrain | kBackward
        for layer in net.layers:
            for p in layer.params:
                stub.collect(p)
            layer.forward(fwd, net.srclayers(layer))
        for layer in reversed(net.layers):
            layer.backward(bwd, net.srclayers(layer))
            for p in layer.params:
                stub.update(step, p)

    def test_one_batch(self, phase: int, net) -> None:
        flag = phase | kForward
        for layer in net.layers:
            layer.forward(flag, net.srclayers(layer))
