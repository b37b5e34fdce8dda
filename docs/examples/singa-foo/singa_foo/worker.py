from singa_core.layer import kBackward, kForward, kTrain
from singa_core.worker import Worker

from singa_foo import foo_pb2


class FooWorker(Worker):
    """Back-propagation over `repeat` mini-batches per training step."""

    def __init__(self, job):
        super().__init__(job)
        self.repeat = job.train_one_batch.Extensions[foo_pb2.foo_conf].repeat

    def train_one_batch(self, step, net, stub):
        for _ in range(self.repeat):
            for layer in net.layers:
                for p in layer.params:
                    stub.collect(p)  # the value is at least as new as the last update
                layer.forward(kTrain | kForward, net.srclayers(layer))
            for layer in reversed(net.layers):
                layer.backward(kTrain | kBackward, net.srclayers(layer))
                for p in layer.params:
                    stub.update(step, p)  # p.grad is the server's now: do not read it again

    def test_one_batch(self, phase, net):
        for layer in net.layers:
            layer.forward(phase | kForward, net.srclayers(layer))
