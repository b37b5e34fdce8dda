"""Every built-in layer type that computes on a device captures: its forward and backward
on ``standin:cuda`` recorded once (``singa_core.capture``) and replayed on new
inputs give what running them again gives, bit for bit; or the capture is refused with one
line naming the layer and the call, for the types listed in ``NOT_CAPTURED`` with why.

The cases are the registry's gradient cases (tests/layers/test_registry_gradients.py)."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core import capture
from singa_core.cuda import EmulatedRuntime
from singa_core.device import standin_device, to_host, using_device
from singa_core.layer import kBackward, kForward
from tests.layers.test_registry_gradients import CASES, _builtin_layer_types

pytestmark = pytest.mark.skipif(EmulatedRuntime.compiler() is None, reason="needs a C++ compiler")

#: layer types whose pass cannot be captured here, and the words of their refusal (why)
NOT_CAPTURED: dict[str, str] = {
    # top-k through temporaries, and the hits read back for the metric every batch
    "kAccuracy": "cannot allocate device memory",
    "kArgSort": "cannot allocate device memory",  # its top-k through temporaries
    "kBM": "cannot allocate device memory",  # einsum, which takes no out= on CuPy
    # the copy-by-copy cell multiplies into temporaries; in an unrolled net the copies
    # run as one (the GRU run), which captures (char-rnn, tests/test_graphs.py)
    "kGRU": "cannot allocate device memory",
    # indices and labels are checked on the host copy of a host source (an input layer
    # in a net: the net captures); this case feeds them from the device, which is a read
    "kEmbedding": "cannot read a device value on the host",
    "kSoftmaxLoss": "cannot read a device value on the host",
}


def _outputs(layer, srcs) -> list[np.ndarray]:
    arrays = [layer.data, layer.grad, *(s.grad for s in srcs)]
    arrays += [p.grad for p in layer.params]
    return [to_host(a).copy() for a in arrays if a is not None and a.dtype.kind == "f"]


def _pass(case, backward: bool) -> None:
    phase = case.checker.phase
    case.layer.forward(phase | kForward, case.srcs)
    if backward:
        case.layer.backward(phase | kBackward, case.srcs)


def _perturb(srcs) -> None:
    for s in srcs:
        if s.data is not None and s.data.dtype.kind == "f":
            s.data *= np.float32(1.5)


@pytest.mark.parametrize("type_name", sorted(CASES))
def test_a_layers_pass_replays_as_it_runs_or_says_why_not(type_name, tmp_path):
    cls = _builtin_layer_types()[type_name]
    if cls.placement != "device":
        pytest.skip(f"{type_name} computes on the host: a step's host part runs it")
    device = standin_device("cuda")
    with using_device(device), device.activate(), capture.step_scope():
        made = CASES[type_name](tmp_path)
        for case in made if isinstance(made, list) else [made]:
            backward = case.no_gradient is None
            capture.prepare_step(1)
            _pass(case, backward)  # allocates what the pass needs
            capture.prepare_step(2)
            try:
                with capture.capturing() as graph:
                    _pass(case, backward)
            except capture.CaptureRefused as refused:
                assert type_name in NOT_CAPTURED, f"{type_name}: {refused}"
                assert NOT_CAPTURED[type_name] in str(refused)
                assert f"'{case.layer.name}'" in str(refused)  # names the layer
                continue
            assert type_name not in NOT_CAPTURED, f"{type_name} captures now"
            _perturb(case.srcs)
            capture.prepare_step(3)
            graph.replay()
            replayed = _outputs(case.layer, case.srcs)
            _pass(case, backward)  # the same pass, eagerly, on the same inputs
            again = _outputs(case.layer, case.srcs)
            for a, b in zip(replayed, again, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=type_name)
