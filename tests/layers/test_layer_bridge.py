"""kBridgeSrc / kBridgeDst: an in-process bridge pair reproduces data and gradients.

Includes SINGA 0.3's test_connection_layers.cc Bridge test (N=10, M=20: kDummy input →
bridge src → bridge dst → kDummy output).
"""

import numpy as np
import pytest
from singa_builtins.layers.bridge import (
    LOCAL,
    BridgeDstLayer,
    BridgeSrcLayer,
    BridgeTransport,
    LocalTransport,
)
from singa_builtins.layers.dummy import DummyLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx, peak_bytes

N, M = 10, 20
FWD, BWD = kTrain | kForward, kTrain | kBackward


def pair(src):
    bsrc = build(BridgeSrcLayer, 'name: "bridge_src"', [src])
    bdst = build(BridgeDstLayer, 'name: "bridge_dst"', [bsrc])
    return bsrc, bdst


def test_bridge_0_3():
    assert BridgeSrcLayer.type_names == ("kBridgeSrc",)
    assert BridgeDstLayer.type_names == ("kBridgeDst",)
    inp = build(DummyLayer, f'name: "in" dummy_conf {{ input: true shape: {N} shape: {M} }}', [])
    bsrc, bdst = pair(inp)
    out = build(DummyLayer, 'name: "out" dummy_conf { output: true }', [bdst])
    assert bsrc.shape == bdst.shape == out.shape == (N, M)
    inp.forward(FWD, [])
    bsrc.forward(FWD, [inp])
    bdst.forward(FWD, [bsrc])
    out.forward(FWD, [bdst])
    np.testing.assert_array_equal(out.data, inp.data)
    assert not np.shares_memory(bdst.data, inp.data)  # the dst holds its own copy
    out.backward(BWD, [bdst])
    bdst.backward(BWD, [bsrc])
    bsrc.backward(BWD, [inp])
    np.testing.assert_array_equal(inp.grad, out.grad)


def test_src_shares_its_sources_arrays():
    src = SourceLayer(np.ones((2, 3)))
    bsrc, bdst = pair(src)
    assert bsrc.data is src.data and bsrc.grad is src.grad
    assert bsrc.grad_for(bdst) is src.grad
    assert bsrc.transport is LOCAL and bdst.transport is LOCAL
    assert isinstance(LOCAL, LocalTransport)


def test_source_without_gradient():
    src = SourceLayer(np.ones((2, 3)), grad=False)
    bsrc, bdst = pair(src)
    assert bsrc.grad is None and bsrc.grad_for(bdst) is None
    bsrc.forward(FWD, [src])
    bdst.forward(FWD, [bsrc])
    bdst.backward(BWD, [bsrc])
    bsrc.backward(BWD, [src])
    np.testing.assert_array_equal(bdst.data, 1.0)


def test_transport_is_a_seam():
    calls = []

    class Recording(BridgeTransport):
        def send_data(self, src):
            calls.append(("send_data", src.name))

        def recv_data(self, dst, pair):
            calls.append(("recv_data", dst.name, pair.name))
            dst.data[...] = 5.0

        def send_grad(self, dst, pair):
            calls.append(("send_grad", dst.name, pair.name))

        def recv_grad(self, src):
            calls.append(("recv_grad", src.name))
            src.grad[...] = 3.0

    src = SourceLayer(np.ones((2, 3)))
    bsrc, bdst = pair(src)
    bsrc.transport = bdst.transport = Recording()
    bsrc.forward(FWD, [src])
    bdst.forward(FWD, [bsrc])
    bdst.backward(BWD, [bsrc])
    bsrc.backward(BWD, [src])
    assert calls == [
        ("send_data", "bridge_src"),
        ("recv_data", "bridge_dst", "bridge_src"),
        ("send_grad", "bridge_dst", "bridge_src"),
        ("recv_grad", "bridge_src"),
    ]
    assert (bdst.data == 5.0).all() and (src.grad == 3.0).all()
    with pytest.raises(NotImplementedError):
        BridgeTransport().send_data(bsrc)


def test_errors():
    with pytest.raises(SingaError, match="source"):
        BridgeSrcLayer(layer_conf('name: "b"'), make_ctx()).setup([])
    src = SourceLayer(np.ones((2, 3)))
    with pytest.raises(SingaError, match="source"):
        BridgeDstLayer(layer_conf('name: "b"'), make_ctx()).setup([src, src])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    bsrc, bdst = pair(src)

    def step():
        bsrc.forward(FWD, [src])
        bdst.forward(FWD, [bsrc])
        bdst.backward(BWD, [bsrc])
        bsrc.backward(BWD, [src])

    assert peak_bytes(step) < 2_000


def _src_case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((3, 4)))
    bsrc, _ = pair(src)
    return GradCase(bsrc, [src])


def _dst_case(tmp_path):
    # the dst's source is the bridge src, whose data and gradient are the input's arrays:
    # this checks the gradient of the pair w.r.t. the input
    src = SourceLayer(np.random.default_rng(1).standard_normal((3, 4)))
    bsrc, bdst = pair(src)
    return GradCase(bdst, [bsrc])


GRADIENT_CASES = {"kBridgeSrc": _src_case, "kBridgeDst": _dst_case}
