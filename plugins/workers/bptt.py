"""kBPTT: back-propagation through time over an unrolled net (SINGA 0.3 §5.3 BPTTWorker).

The net is unrolled by the core (``unroll_len``; copies ``i#L`` whose Params share the value
and the gradient of copy 0). TrainOneBatch:

The net is executed as ``net.units()``: the layers, except that all copies of a layer
form one unit where they can (a wide instance of a row-independent layer, a GRU's run; see
:mod:`singa_core.sequences`), each called as a layer with ``net.srclayers(unit)``;
``SINGA_SEQUENCE_RUNS=0`` runs every copy by itself.

1. the gradients of the Params holding their own (copy 0 of each unrolled Param) are zeroed,
   all in one launch per device (kernel ``zero_many``); forward over the layers in net
   order with ``kTrain | kForward``, a layer's Params collected before it runs;
2. backward in reverse order with ``kTrain | kBackward | kAggGrad``: every copy adds its share
   into the one gradient; a Param is handed to the servers (``stub.update``) right after the
   last layer that adds to it has run. (0.3 sent the update at the copy-0 layer, which is the
   last one only when the net order puts it there.)

TestOneBatch (test, validation and sampling nets): forward with ``phase | kForward``. From the
second batch of an evaluation pass on, a layer naming a ``dynamic_srclayer`` (kRNNDummy) takes
that layer's current output as its source — the character sampled at the previous step. A
recurrent layer of a net that is not unrolled (one step per batch, as in sampling) carries
its hidden state over to the next batch; each evaluation pass starts from the zero state.
0.3's ``full_state_`` was always false, so its sampling restarted from a zero state at every
character (see docs/compat.md). In an unrolled test net every batch starts from zeros, as in
training.
"""

from __future__ import annotations

import numpy as np

from singa_core.cuda import CUPY, launch_multi_tensor, multi_tensor_source
from singa_core.device import array_module
from singa_core.errors import SingaError
from singa_core.kernels import define_kernel, kernels_for
from singa_core.layer import kAggGrad, kBackward, kForward, kTrain
from singa_core.names import base_layer_name, unrolled_name
from singa_core.worker import Worker


# -- zeroing the window's gradients: one launch on a GPU for all of them --------------------
def zero_many_host(arrays) -> None:
    """Every array of ``arrays`` filled with zeros."""
    for a in arrays:
        a.fill(0.0)


_ZERO_SOURCE = multi_tensor_source("singa_zero_many", 1, 0, "", "T0[j] = 0.0f;")


def zero_many_cuda(arrays, rt=CUPY) -> None:
    launch_multi_tensor(rt, _ZERO_SOURCE, "singa_zero_many", [list(arrays)], [])


zero_many_cuda.source = _ZERO_SOURCE
define_kernel(
    "zero_many",
    host=zero_many_host,
    generic=zero_many_host,
    cuda=zero_many_cuda,
    fits=lambda arrays: all(a.flags.c_contiguous and a.dtype == np.float32 for a in arrays),
    doc="fill a list of float32 arrays with zeros (one launch on a GPU)",
)


class BPTTWorker(Worker):
    type_names = ("kBPTT",)
    handles_unrolled_nets = True

    def __init__(self, job) -> None:
        super().__init__(job)
        self._plans: dict[int, tuple] = {}
        self._eval: dict[int, dict] = {}

    # -- training ------------------------------------------------------------------------
    def _plan(self, net):
        """The net's units (``net.units()``: single layers, and runs of all copies of a
        layer at once) and, per unit, the gradient-owning Params to collect before its
        forward and those to send after its backward (their last contributor); and the
        owners to zero at the start of a step, per device."""
        plan = self._plans.get(id(net))
        if plan is None:
            units = net.units()
            first_use: dict[int, int] = {}
            owners = {}
            for i, unit in enumerate(units):
                for p in unit.params:
                    g = p.grad_owner
                    owners[id(g)] = g
                    first_use.setdefault(id(g), i)
            collect_before = [[] for _ in units]
            send_after = [[] for _ in units]
            for key, g in owners.items():
                collect_before[first_use[key]].append(g)
                send_after[first_use[key]].append(g)  # backward runs in reverse order
            steps = [(unit.forward, unit.backward, net.srclayers(unit)) for unit in units]
            # every gradient of the window zeroed at once before the forward pass, in one
            # launch per device (forward reads no gradient)
            by_device: dict[int, list] = {}
            for g in owners.values():
                by_device.setdefault(id(array_module(g.grad)), []).append(g)
            zero = [(kernels_for(ps[0].grad).zero_many, ps) for ps in by_device.values()]
            plan = (steps, collect_before, send_after, zero)
            self._plans[id(net)] = plan
        return plan

    def train_one_batch(self, step: int, net, stub) -> None:
        steps, collect_before, send_after, zero = self._plan(net)
        fwd, bwd = kTrain | kForward, kTrain | kBackward | kAggGrad
        for fill, owners in zero:
            fill([p.grad for p in owners])
        for i, (forward, _, srcs) in enumerate(steps):
            for p in collect_before[i]:
                stub.collect(p)
            forward(fwd, srcs)
        for i in range(len(steps) - 1, -1, -1):
            _, backward, srcs = steps[i]
            backward(bwd, srcs)
            for p in send_after[i]:
                stub.update(step, p)

    # -- evaluation and sampling -----------------------------------------------------------
    def start_evaluation(self, phase: int, net) -> None:
        counts: dict[str, int] = {}
        for layer in net.layers:
            if layer.recurrent:
                name = base_layer_name(layer.name)
                counts[name] = counts.get(name, 0) + 1
        carriers = []
        for layer in net.layers:
            if layer.recurrent:
                layer.reset_state()
                if counts[base_layer_name(layer.name)] == 1:  # one step per batch
                    carriers.append(layer)
        dynamic = {}
        for layer in net.layers:
            name = getattr(layer, "dynamic_srclayer", None)
            if name:
                dynamic[layer.name] = [self._dynamic_source(net, layer, name)]
        self._eval[id(net)] = {"batch": 0, "carriers": carriers, "dynamic": dynamic}

    @staticmethod
    def _dynamic_source(net, layer, name: str):
        for candidate in (unrolled_name(int(layer.conf.unroll_index), name), name):
            src = net.by_name.get(candidate)
            if src is not None and candidate != layer.name:
                return src.output_for(layer)
        raise SingaError(
            f"layer '{layer.name}' names dynamic_srclayer '{name}', which is not in this net",
            where=layer.ctx.locate("rnn_dummy_conf.dynamic_srclayer"),
            help="dynamic_srclayer names the layer whose output feeds the next step (e.g. the "
            'kArgSort layer of a sampling net: dynamic_srclayer: "argsort")',
        )

    def test_one_batch(self, phase: int, net) -> None:
        state = self._eval.get(id(net))
        if state is None:
            self.start_evaluation(phase, net)
            state = self._eval[id(net)]
        flag = phase | kForward
        dynamic = state["dynamic"] if state["batch"] > 0 else {}
        if dynamic:
            for layer in net.layers:
                layer.forward(flag, dynamic.get(layer.name) or net.srclayers(layer))
        else:
            for forward, _, srcs in self._plan(net)[0]:
                forward(flag, srcs)
        for layer in state["carriers"]:
            layer.carry_state()
        state["batch"] += 1
