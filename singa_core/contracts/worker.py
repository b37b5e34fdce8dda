"""The Worker interface: a TrainOneBatch algorithm (SINGA 0.3 §5.3).

A worker runs one mini-batch over a :class:`singa_core.netbuilder.net.NeuralNet` and talks to the
parameter servers only through a :class:`singa_core.contracts.stub.ParamStub`: ``stub.collect(p)``
before a Param's value is used, ``stub.update(step, p)`` once its gradient is ready. Which
engine sits behind the stub (in-process, other processes, other machines) is invisible here.
"""

from __future__ import annotations

from singa_core.schema import job_pb2


class Worker:
    """Contract for worker plugins (kBP, kCD, kBPTT, user algorithms).

    Constructed as ``cls(job)`` with the whole ``singa.JobProto`` (so a user algorithm can
    read its own AlgProto extension from ``job.train_one_batch``).
    """

    #: the worker runs nets whose unrolled Params share one gradient (``net_conf
    #: unroll_len`` > 1): it zeroes that gradient, runs backward with ``kAggGrad`` and sends
    #: each shared gradient once (kBPTT). Other workers are refused such nets at set-up.
    handles_unrolled_nets: bool = False

    #: the phase flags ``train_one_batch`` gives the layers' ``forward`` (what
    #: :meth:`host_part` gives the host's layers)
    train_forward_phase: int = job_pb2.kTrain | job_pb2.kForward

    def __init__(self, job) -> None:
        self.job = job

    def host_part(self, step: int, net) -> None:
        """What a training step does on the host before its device work: the ``forward``
        of the layers that compute on the host (input layers reading the next batch into
        their buffers), in net order. A step whose device work is replayed
        (``singa_core.contracts.capture``) runs this, then the replay; a worker whose
        train_one_batch does other host work per step overrides it."""
        for layer in net.layers:
            if layer.device.is_host:
                layer.forward(self.train_forward_phase, net.srclayers(layer))

    def start_evaluation(self, phase: int, net) -> None:
        """Called before each pass of ``test_one_batch`` calls (a test/validation run)."""

    def train_one_batch(self, step: int, net, stub) -> None:  # pragma: no cover
        raise NotImplementedError

    def test_one_batch(self, phase: int, net) -> None:  # pragma: no cover
        raise NotImplementedError
