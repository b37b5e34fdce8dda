"""BridgeTransport between the workers of one group (SINGA 0.3's bridge layers, §2.6).

Each kBridgeSrc/kBridgeDst pair of a group has two shared-memory buffers: ``bd<k>`` for the
data (src → dst) and ``bg<k>`` for the gradient (dst → src). The sending side copies into
the buffer and puts a small ``("bdata", k)`` / ``("bgrad", k)`` notification on the peer
worker's queue; the receiving side waits for it (with the usual abort checks) and copies
out. A buffer is never rewritten before it was read: the next data of a pair needs the
gradient of the previous step, which the dst sends only after reading the data.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers.bridge import BridgeDstLayer, BridgeTransport

from singa_core.device import copy_into


class ShmBridgeTransport(BridgeTransport):
    def __init__(self, rt, pair) -> None:
        self.rt = rt
        self.pair = pair
        self.data = rt.ctx.segs[f"bd{pair.key}"]
        self.grad = rt.ctx.segs[f"bg{pair.key}"]
        queues = rt.shared.worker_queues
        self.to_dst = queues[(pair.group, pair.dst_part)]
        self.to_src = queues[(pair.group, pair.src_part)]

    def _wait(self, kind: str) -> None:
        key = self.pair.key
        self.rt.mailbox.wait(lambda m: m[0] == kind and m[1] == key)

    def send_data(self, src) -> None:
        copy_into(self.data.reshape(src.data.shape), src.data)
        self.to_dst.put(("bdata", self.pair.key))

    def recv_data(self, dst, pair) -> None:
        self._wait("bdata")
        copy_into(dst.data, self.data.reshape(dst.data.shape))

    def send_grad(self, dst, pair) -> None:
        copy_into(self.grad.reshape(dst.grad.shape), dst.grad)
        self.to_src.put(("bgrad", self.pair.key))

    def recv_grad(self, src) -> None:
        self._wait("bgrad")
        copy_into(src.grad, self.grad.reshape(src.grad.shape))


def bridge_pairs(full_net, group: int, first_key: int) -> list:
    """The bridge pairs of a (partitioned) train net, for one worker group."""
    from singa_builtins.engines.shm.context import BridgePair

    out = []
    for layer in full_net.layers:
        if not isinstance(layer, BridgeDstLayer):
            continue
        src = full_net.srclayers(layer)[0]
        out.append(
            BridgePair(
                first_key + len(out),
                group,
                src.name,
                layer.name,
                int(src.conf.partition_id),
                int(layer.conf.partition_id),
                int(np.prod(layer.data.shape)),
            )
        )
    return out


def install_bridges(rt, full_net, net) -> None:
    """Give the bridge layers of this worker's partition their transport,
    ``rt.bridge_transport(pair)`` (shared memory for ``shm``)."""
    pairs = [p for p in rt.shared.bridges if p.group == rt.group]
    if not pairs:
        return
    mine = {layer.name: layer for layer in net.layers}
    for pair in pairs:
        transport = rt.bridge_transport(pair)
        for name in (pair.src, pair.dst):
            if name in mine:
                mine[name].transport = transport
