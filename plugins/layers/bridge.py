"""kBridgeSrc / kBridgeDst: the two ends of an edge between partitions (SINGA 0.3 §2.6,
connection_layer/bridge.cc).

* kBridgeSrc (one source): ``data`` *is* the source's data array and ``grad`` *is* the
  buffer ``src.grad_for(bridge)`` (shared, no copy). Forward sends ``data`` to the paired
  kBridgeDst; backward receives the dst's gradient into ``grad``, i.e. into the source's
  buffer.
* kBridgeDst (``srclayers = [its kBridgeSrc]``): own ``data``/``grad`` shaped like the
  source's. Forward receives the src's data into ``data``; backward sends ``grad`` back.

Moving arrays between the two ends is the job of a :class:`BridgeTransport`, set per layer
as ``layer.transport``. The default, :class:`LocalTransport`, is for both ends in one
process: sending is a no-op and receiving copies from the paired layer's arrays. An engine
that puts the ends in different processes sets a transport that sends and receives
messages instead (0.3: frames of the dst name and the raw floats, a ``ready`` flag per
direction).
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer


class BridgeTransport:
    """The seam between a bridge pair: four calls, in the order 0.3's bridges make them."""

    def send_data(self, src: BridgeSrcLayer) -> None:
        """kBridgeSrc forward: hand ``src.data`` to the paired dst."""
        raise NotImplementedError

    def recv_data(self, dst: BridgeDstLayer, pair) -> None:
        """kBridgeDst forward: fill ``dst.data`` with the data of ``pair`` (its src)."""
        raise NotImplementedError

    def send_grad(self, dst: BridgeDstLayer, pair) -> None:
        """kBridgeDst backward: hand ``dst.grad`` to ``pair`` (its src)."""
        raise NotImplementedError

    def recv_grad(self, src: BridgeSrcLayer) -> None:
        """kBridgeSrc backward: fill ``src.grad`` (the source's buffer) from the dst."""
        raise NotImplementedError


class LocalTransport(BridgeTransport):
    """Both ends in one process: the dst copies straight from/into the src's arrays."""

    def send_data(self, src):
        pass

    def recv_data(self, dst, pair):
        np.copyto(dst.data, pair.data)

    def send_grad(self, dst, pair):
        buf = pair.grad_for(dst)
        if buf is not None:
            np.copyto(buf, dst.grad)

    def recv_grad(self, src):
        pass


LOCAL = LocalTransport()


class BridgeSrcLayer(NeuronLayer):
    type_names = ("kBridgeSrc",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.transport: BridgeTransport = LOCAL
        self.data = srcs[0].data
        self.grad = srcs[0].grad_for(self)  # None if the source takes no gradient

    def forward(self, phase, srcs):
        self.data = srcs[0].data  # the source's array (no copy)
        self.transport.send_data(self)

    def backward(self, phase, srcs):
        if self.grad is not None:
            self.transport.recv_grad(self)


class BridgeDstLayer(NeuronLayer):
    type_names = ("kBridgeDst",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.transport: BridgeTransport = LOCAL
        self.alloc(srcs[0].data.shape)

    def forward(self, phase, srcs):
        self.transport.recv_data(self, srcs[0])

    def backward(self, phase, srcs):
        self.transport.send_grad(self, srcs[0])
