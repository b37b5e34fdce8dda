"""kCD: contrastive divergence for RBMs (SINGA 0.3 §5.3 CDWorker).

TrainOneBatch, in 0.3's order:

1. every layer (data, preprocessing, inner-product, RBM ...) in net order: collect its
   Params, ``forward(kPositive)``;
2. the RBM layers (kRBMVis/kRBMHid, net order: visible then hidden):
   ``forward(kNegative | kTest)`` — the first Gibbs step; the visible layer reports the
   reconstruction error;
3. ``cd_k − 1`` more times (``train_one_batch.cd_conf.cd_k``, default 1): the RBM layers
   ``forward(kNegative)``;
4. the RBM layers: ``backward(kTrain)`` (the CD update direction into the Params' grads), then
   ``stub.update`` for each of their Params (the hidden layer's shared weight included: it
   contributes a zero gradient, handed over first). 0.3 updated each layer's Params after
   its own backward; an RBM layer's backward reads no Param, so updating them all after
   the last backward computes the same.

TestOneBatch: every layer ``forward(phase | kPositive)``, then the visible RBM layers
``forward(kNegative | kTest)`` (reconstruction error only).
"""

from __future__ import annotations

from singa_builtins.layers._rbm import RBMLayer
from singa_builtins.layers.rbm_vis import RBMVisLayer

from singa_core.layer import kNegative, kPositive, kTest, kTrain
from singa_core.worker import Worker


class CDWorker(Worker):
    type_names = ("kCD",)
    train_forward_phase = kPositive

    @property
    def cd_k(self) -> int:
        return max(int(self.job.train_one_batch.cd_conf.cd_k), 1)

    def train_one_batch(self, step: int, net, stub) -> None:
        for layer in net.layers:
            for p in layer.params:
                stub.collect(p)
            layer.forward(kPositive, net.srclayers(layer))
        rbms = [layer for layer in net.layers if isinstance(layer, RBMLayer)]
        for layer in rbms:
            layer.forward(kNegative | kTest, net.srclayers(layer))
        for _ in range(self.cd_k - 1):
            for layer in rbms:
                layer.forward(kNegative, net.srclayers(layer))
        for layer in rbms:
            layer.backward(kTrain, net.srclayers(layer))
        # zero contributions first (kRBMHid's share of the weight): the one that is not
        # zero then arrives last and is used as it is, not copied to wait for the others
        params = [p for layer in rbms for p in layer.params]
        for p in sorted(params, key=lambda p: not p.grad_zero):
            stub.update(step, p)

    def test_one_batch(self, phase: int, net) -> None:
        for layer in net.layers:
            layer.forward(phase | kPositive, net.srclayers(layer))
        for layer in net.layers:
            if isinstance(layer, RBMVisLayer):
                layer.forward(kNegative | kTest, net.srclayers(layer))
