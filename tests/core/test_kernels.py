"""The kernel seam: every kernel's CUDA implementation agrees with its host one (run on the
CPU by the emulated runtime), counts as its launches on the stand-in, and plugins can
define and implement kernels."""

from __future__ import annotations

import numpy as np
import pytest
import singa_builtins.layers._conv  # noqa: F401  (defines its kernels)
import singa_builtins.layers._pool  # noqa: F401
import singa_builtins.layers.activation  # noqa: F401
import singa_builtins.layers.gru  # noqa: F401
import singa_builtins.layers.lrn  # noqa: F401
import singa_builtins.layers.softmax_loss  # noqa: F401
import singa_builtins.updaters.sgd  # noqa: F401
import singa_builtins.workers.bptt  # noqa: F401

import singa_core.blas  # noqa: F401
import singa_core.running.numeric  # noqa: F401
from singa_core import kernels as K
from singa_core.contracts import standin
from singa_core.cuda import EmulatedRuntime
from singa_core.device import standin_device
from singa_core.errors import SingaError
from singa_core.testing import check_kernel


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- one case per kernel: (args, indices of the arguments it writes, tolerance) --------------
def _softmax_case(rng, topk, ties=False):
    B, D = 37, 11
    x = _f32(rng, B, D) * 3
    if ties:
        x[::3, :4] = 1.5  # equal logits in some rows, the label among them or not
    labels = rng.integers(0, D, B).astype(np.int32)
    args = [x, labels, np.empty((B, D), np.float32), np.empty((B, 2)), np.zeros(1, np.int32),
            np.array([0.25, 0.5]), np.zeros(1), topk, 0.7]  # fmt: skip
    return args, [2, 5, 6], 2e-6


def _bias_softmax_case(rng, topk, ties=False):
    """softmax_xent's case with a bias over the classes, added to the logits in place."""
    args, outs, tol = _softmax_case(rng, topk, ties)
    b = _f32(rng, args[0].shape[1])
    return [args[0], b, *args[1:]], [0, *(j + 1 for j in outs)], tol


def _softmax_grad_case(rng):
    B, D = 13, 9
    prob = np.abs(_f32(rng, B, D))
    labels = rng.integers(0, D, B).astype(np.int64)
    return [prob, labels, np.empty((B, D), np.float32), 0.0625], [2], 0


def _nonfinite_case(rng, bad):
    arrays = [_f32(rng, 4, 5), _f32(rng, 300), _f32(rng, 3)]
    if bad:
        arrays[1][123] = np.nan
        arrays[2][0] = np.inf
    return [arrays, np.full(1, 2**31 - 1, np.int32), 17], [1], 0


def _act_forward_case(rng, layout="c"):
    x = _f32(rng, 6, 5, 4) * 3
    x[0, 0, :2] = (0.0, -0.0)
    out = np.empty_like(x)
    if layout == "t":  # NCHW views of batch-innermost buffers: dense, not C-contiguous
        x, out = x.transpose(2, 0, 1), out.transpose(2, 0, 1)
    elif layout == "strided":  # every other row: the kernel's general path
        x, out = x[:, ::2], out[:, ::2]
    return [x, out], [1], 4e-7


def _act_backward_case(rng, layout="c", mask=False):
    y = np.tanh(_f32(rng, 6, 5, 4))
    y[0, 0, 0] = 0.0
    g = _f32(rng, 6, 5, 4)
    out = np.empty_like(y)
    scratch = np.empty(y.shape, dtype=bool if mask else np.float32)
    if layout == "t":
        y, g, out, scratch = (a.transpose(2, 0, 1) for a in (y, g, out, scratch))
    return [y, g, out, scratch], [2], 4e-7


def _bias_act_case(rng, layout="c"):
    """A product's data, its bias (one per column) and the activation's output: on a
    device the activation adds the bias in place and applies itself in one launch."""
    x = _f32(rng, 9, 7) * 3
    b = _f32(rng, 7)
    x[0, :2] = (-b[0], -b[1])  # sums of exactly 0.0
    out = np.empty_like(x)
    if layout == "t":  # not C-contiguous: the column of element i is not i % 7 (numpy's path)
        x, out = np.ascontiguousarray(x.T).T, np.ascontiguousarray(out.T).T
    return [x, b, out], [0, 2], 4e-7


ACTIVATIONS = ("relu", "sigmoid", "tanh", "stanh")

#: (kh, kw, ph, pw, sh, sw): overlapping, non-overlapping, padded, rectangular windows
WINDOWS = [(3, 3, 0, 0, 2, 2), (2, 2, 0, 0, 2, 2), (3, 3, 1, 1, 2, 2), (3, 2, 1, 0, 1, 2)]


def _pool_forward_case(rng, window, method, nchw=False):
    kh, kw, ph, pw, sh, sw = window
    C, H, W, B = 3, 7, 8, 4
    x = _f32(rng, C, H, W, B)
    x[0, :2, :2] = 0.5  # ties: the first maximum wins
    if nchw:  # an NCHW source: its CHWN view is strided
        x = np.ascontiguousarray(x.transpose(3, 0, 1, 2)).transpose(1, 2, 3, 0)
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    out = np.empty((C, oh, ow, B), np.float32)
    argmax = np.zeros((C, oh, ow, B), np.uint8)
    return [x, out, argmax, *window, method, True], [1, 2], 1e-7


def _pool_backward_case(rng, window, method, nchw=False):
    kh, kw, ph, pw, sh, sw = window
    C, H, W, B = 3, 7, 8, 4
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    g = _f32(rng, C, oh, ow, B)
    argmax = rng.integers(0, kh * kw, (C, oh, ow, B)).astype(np.uint8)
    target = np.empty((C, H, W, B), np.float32)
    if nchw:
        target = np.empty((B, C, H, W), np.float32).transpose(1, 2, 3, 0)
    return [g, argmax, target, *window, method], [2], 1e-7


MAX, AVG = 0, 1


def _lrn_arrays(rng, C, layout):
    B, H, W = 3, 4, 5
    shape = (B, C, H, W)
    if layout == "chwn":  # NCHW views of batch-innermost buffers

        def make(a):
            return np.ascontiguousarray(a.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
    else:

        def make(a):
            return a

    return shape, make


def _lrn_forward_case(rng, C=7, n=5, beta=0.75, layout="nchw"):
    shape, make = _lrn_arrays(rng, C, layout)
    x = make(_f32(rng, *shape))
    y, norm, powb, tmp = (make(np.empty(shape, np.float32)) for _ in range(4))
    return [x, y, norm, powb, tmp, n // 2, 1e-3 / n * 3, 1.0, beta], [1, 2, 3], 3e-7


def _lrn_backward_case(rng, C=7, n=5, layout="nchw"):
    shape, make = _lrn_arrays(rng, C, layout)
    x = make(_f32(rng, *shape))
    norm = make(1 + np.abs(_f32(rng, *shape)))
    powb = make(norm ** np.float32(0.75))
    y = make(x / powb)
    g = make(_f32(rng, *shape))
    out, tmp = (make(np.empty(shape, np.float32)) for _ in range(2))
    return [x, y, g, norm, powb, out, tmp, n // 2, 2 * 1e-3 * 0.75 / n], [5], 3e-7


def _im2col_case(rng, window, nchw=False):
    kh, kw, ph, pw, sh, sw = window
    C, H, W, B = 2, 7, 8, 3
    x = _f32(rng, C, H, W, B)
    if nchw:
        x = np.ascontiguousarray(x.transpose(3, 0, 1, 2)).transpose(1, 2, 3, 0)
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    col = np.full((C, kh, kw, oh, ow, B), np.nan, np.float32)
    return [x, col, *window], [1], 0


def _col2im_case(rng, window, nchw=False):
    kh, kw, ph, pw, sh, sw = window
    C, H, W, B = 2, 7, 8, 3
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    col = _f32(rng, C, kh, kw, oh, ow, B)
    target = np.full((C, H, W, B), np.nan, np.float32)
    if nchw:
        target = np.full((B, C, H, W), np.nan, np.float32).transpose(1, 2, 3, 0)
    return [col, target, *window], [1], 0


def _gru_step_forward_case(rng, bias):
    B, H = 5, 7
    g, p = _f32(rng, B, 3 * H), _f32(rng, B, 3 * H)  # x·Wᵀ and h·Uᵀ, stacked
    b = [_f32(rng, H) for _ in range(3)]
    # p's first block is the host's scratch: only the gates and the output are compared
    return [g, p, *b, _f32(rng, B, H), np.empty((B, H), np.float32), bias], [0, 6], 3e-7


def _gru_step_backward_case(rng):
    B, H = 5, 7
    grad, grad2, rec, h = (_f32(rng, B, H) for _ in range(4))
    gates = (1 / (1 + np.exp(-_f32(rng, B, 3 * H)))).astype(np.float32)
    p = _f32(rng, B, 3 * H)
    outs = [np.empty((B, 3 * H), np.float32), np.empty((B, 3 * H), np.float32)]
    return [grad, grad2, rec, gates, p, h, *outs, np.empty((B, H), np.float32)], [6, 7, 8], 3e-7


def _gemm_case(rng, beta, ta=False):
    a = _f32(rng, 6, 5)
    a = np.ascontiguousarray(a.T).T if ta else a  # a transposed view (F-contiguous)
    return [a, _f32(rng, 5, 7), _f32(rng, 6, 7), beta], [2], 2e-6


#: kernels whose CUDA side is a library call (cuBLAS), not CUDA C: no source for nvcc (the
#: emulated runtime serves the call with the host's BLAS)
LIBRARY_CALLS = {"gemm"}

CASES = {
    "gemm": [lambda r, b=b, t=t: _gemm_case(r, b, t) for b in (0.0, 1.0) for t in (False, True)],
    "gru_step_forward": [
        lambda r: _gru_step_forward_case(r, True),
        lambda r: _gru_step_forward_case(r, False),
    ],
    "gru_step_backward": [_gru_step_backward_case],
    "zero_many": [lambda r: ([[_f32(r, 3, 4), _f32(r, 7), _f32(r, 2, 2, 2)]], [0], 0)],
    # Philox4x64-10 in CUDA C against numpy's Philox: bit-equal, an odd tail included
    "philox_uniform": [
        lambda r, n=n: (
            [
                np.empty(n, np.float32),
                *(int(x) for x in r.integers(0, 2**63, 2)),
                3,
                1,
                np.array([41.0]),
            ],
            [0],
            0,
        )
        for n in (1, 8, 1001)
    ],
    "lrn_forward": [
        lambda r, C=C, n=n, b=b, t=t: _lrn_forward_case(r, C, n, b, t)
        for C, n in ((7, 5), (3, 3), (1, 3), (2, 5))
        for b in (0.75, 0.6)
        for t in ("nchw", "chwn")
    ],
    "lrn_backward": [
        lambda r, C=C, n=n, t=t: _lrn_backward_case(r, C, n, t)
        for C, n in ((7, 5), (3, 3), (1, 3), (2, 5))
        for t in ("nchw", "chwn")
    ],
    "im2col": [
        lambda r, w=w, t=t: _im2col_case(r, w, t)
        for w in WINDOWS + [(5, 5, 2, 2, 1, 1)]
        for t in (False, True)
    ],
    "col2im": [
        lambda r, w=w, t=t: _col2im_case(r, w, t)
        for w in WINDOWS + [(5, 5, 2, 2, 1, 1)]
        for t in (False, True)
    ],
    "pool_forward": [
        lambda r, w=w, m=m, t=t: _pool_forward_case(r, w, m, t)
        for w in WINDOWS
        for m in (MAX, AVG)
        for t in (False, True)
    ],
    "pool_backward": [
        lambda r, w=w, m=m, t=t: _pool_backward_case(r, w, m, t)
        for w in WINDOWS
        for m in (MAX, AVG)
        for t in (False, True)
    ],
    **{
        f"{a}_forward": [
            _act_forward_case,
            lambda r: _act_forward_case(r, "t"),
            lambda r: _act_forward_case(r, "strided"),
        ]
        for a in ACTIVATIONS
    },
    **{
        f"{a}_backward": [
            lambda r, m=(a == "relu"): _act_backward_case(r, mask=m),
            lambda r, m=(a == "relu"): _act_backward_case(r, "t", mask=m),
        ]
        for a in ACTIVATIONS
    },
    **{
        f"bias_{a}_forward": [_bias_act_case, lambda r: _bias_act_case(r, "t")] for a in ACTIVATIONS
    },
    "softmax_xent": [
        lambda r: _softmax_case(r, 1),
        lambda r: _softmax_case(r, 3),
        lambda r: _softmax_case(r, 1, ties=True),
        lambda r: _softmax_case(r, 2, ties=True),
    ],
    "bias_softmax_xent": [
        lambda r: _bias_softmax_case(r, 1),
        lambda r: _bias_softmax_case(r, 2, ties=True),
    ],
    "softmax_xent_grad": [_softmax_grad_case],
    "nonfinite_check": [lambda r: _nonfinite_case(r, False), lambda r: _nonfinite_case(r, True)],
}


def _copy(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, list):
        return [_copy(v) for v in x]
    return x


def _close(a, b, tol, what):
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, tol, f"{what}[{i}]")
        return
    if a is None:
        assert b is None
        return
    if tol == 0:
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)


@pytest.fixture(scope="module")
def emulated():
    if EmulatedRuntime.compiler() is None:
        pytest.skip("no C++ compiler to emulate the CUDA kernels with")
    return EmulatedRuntime()


def test_every_kernel_with_a_cuda_implementation_has_a_case():
    # the updaters' kernels: test_an_updater_kernel_equals_its_apply, per updater type
    for module in ("sgd", "rmsprop", "adagrad", "nesterov", "adam", "adadelta", "adammax"):
        __import__(f"singa_builtins.updaters.{module}")
    updaters = {f"{m}_update" for m in ("sgd", "rmsprop", "adagrad", "nesterov", "adam",
                                        "adadelta", "adammax")}  # fmt: skip
    with_cuda = {name for name, k in K.kernels().items() if k.cuda is not None and not k.composite}
    assert with_cuda - set(CASES) - updaters == set()
    assert updaters <= with_cuda


@pytest.mark.parametrize(
    ("name", "i"), [(n, i) for n, cases in CASES.items() for i in range(len(cases))]
)
def test_the_cuda_code_equals_the_host_code_and_launches_what_it_declares(emulated, name, i):
    """The CUDA C compiled for the CPU and run thread by thread (cuBLAS served by the
    host's BLAS) gives the host kernel's results (exactly, or within float32 rounding where
    the order of a sum differs); on standin:cuda it reads nothing back and, where it takes
    the arguments, launches exactly what it declares (singa_core.testing.check_kernel)."""
    args, outs, tol = CASES[name][i](np.random.default_rng(i))
    report = check_kernel(name, args, outs, tol)
    assert report.reads == 0


def test_a_kernel_falls_back_by_the_registrys_decision():
    """A strided source is not what the relu CUDA code indexes: its fits says no, and the
    registry runs the generic code (numpy's functions, each a counted launch)."""
    dev = standin_device("cuda")
    x = dev.asarray(np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32))[:, ::2]
    y = dev.empty((6, 4))
    assert not K.get_kernel("relu_forward").fits(x, y)
    with dev.activate(), standin.counting() as c:
        dev.kernels.relu_forward(x, y)
    assert "kernels:singa_relu_forward" not in c.by_name and c.kernels == 1
    np.testing.assert_array_equal(y.get(), np.maximum(x.get(), 0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_kernel_is_its_launches_on_the_stand_in(name):
    dev = standin_device()
    args, outs, _ = CASES[name][0](np.random.default_rng(0))
    host_args = _copy(args)
    K.get_kernel(name).host(*host_args)

    def to_dev(x):
        if isinstance(x, np.ndarray):
            return dev.asarray(x)
        if isinstance(x, list):
            return [to_dev(v) for v in x]
        return x

    dev_args = to_dev(args)
    with standin.counting() as c:
        getattr(dev.kernels, name)(*dev_args)
    assert (c.kernels, c.reads, c.to_device) == (K.get_kernel(name).launches, 0, 0)
    for j in outs:
        got = dev_args[j]
        got = [None if g is None else g.get() for g in got] if isinstance(got, list) else got.get()
        _close(host_args[j], got, 0, f"{name} argument {j}")


def test_the_stand_in_refuses_host_arrays_in_a_kernel():
    dev = standin_device()
    x = dev.asarray(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        dev.kernels.softmax_xent_grad(x, np.zeros(2, np.int64), x, 1.0)


def test_a_plugin_defines_and_implements_its_own_kernel():
    calls = []

    def scale_host(x, a):
        """x *= a"""
        x *= np.float32(a)
        calls.append("host")

    def scale_generic(x, a):
        x *= np.float32(a)
        calls.append("generic")

    K.define_kernel("test_plugin_scale", host=scale_host)
    try:
        x = np.ones(3, np.float32)
        K.kernels_for(x).test_plugin_scale(x, 2.0)
        assert x.tolist() == [2.0, 2.0, 2.0] and calls == ["host"]
        dev = standin_device()
        with pytest.raises(SingaError, match="no implementation for standin"):
            dev.kernels.test_plugin_scale(dev.asarray(x), 2.0)
        K.implement("test_plugin_scale", "generic", scale_generic)
        y = dev.asarray(x)
        with standin.counting() as c:
            dev.kernels.test_plugin_scale(y, 2.0)
        assert y.get().tolist() == [4.0, 4.0, 4.0] and calls[-1] == "generic"
        assert c.kernels == 1  # the generic path's own call (a multiply)

        def other(x, a):
            pass

        other.__module__ = "another_plugin.kernels"
        with pytest.raises(SingaError, match="defined twice"):
            K.define_kernel("test_plugin_scale", host=other)
        with pytest.raises(SingaError, match="not a device kind"):
            K.implement("test_plugin_scale", "rocm", scale_generic)
    finally:
        K._KERNELS.pop("test_plugin_scale", None)
        K._resolved.clear()
    with pytest.raises(SingaError, match="no kernel named 'test_plugin_scale'"):
        K.get_kernel("test_plugin_scale")


class _Recording(EmulatedRuntime):
    """The emulated runtime, remembering the CUDA sources it was asked to launch."""

    def __init__(self):
        super().__init__()
        self.sources: dict[str, str] = {}

    def kernel(self, source, name):
        self.sources[name + str(hash(source))] = source
        return super().kernel(source, name)


@pytest.mark.slow
def test_every_cuda_source_compiles_with_nvcc(tmp_path):
    """The sources as CUDA (not only as the emulator's C++): nvcc where it is installed
    (NVRTC, which CuPy uses, takes the same language)."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    rt = _Recording()
    for name, cases in CASES.items():
        if name in LIBRARY_CALLS:
            continue
        for make in cases:
            args, _, _ = make(np.random.default_rng(0))
            K.cuda_code(name, rt)(*_copy(args))
    failures = []
    for key, source in rt.sources.items():
        cu = tmp_path / f"{abs(hash(key))}.cu"
        cu.write_text(source)
        done = subprocess.run(
            [nvcc, "--ptx", "-arch=sm_90", "-o", str(cu.with_suffix(".ptx")), str(cu)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            failures.append(f"{key}: {done.stderr}")
    assert failures == [] and len(rt.sources) >= 15


# -- the updaters' kernels: one launch over a step's slices --------------------------------
UPDATERS = {
    "kSGD": "momentum: 0.9 weight_decay: 0.001 clip_low: -0.8 clip_high: 0.8",
    "kRMSProp": "rmsprop_conf { rho: 0.9 } delta: 1e-6 weight_decay: 0.001 clip_low: -1 "
    "clip_high: 1",
    "kAdaGrad": "delta: 1e-6 weight_decay: 0.0005",
    "kNesterov": "momentum: 0.9 weight_decay: 0.001 clip_low: -0.5 clip_high: 0.5",
    "kAdam": "adam_conf { beta1: 0.9 beta2: 0.999 } delta: 1e-7 weight_decay: 0.001",
    "kAdaDelta": "adadelta_conf { rho: 0.95 } delta: 1e-6",
    "kAdamMax": "adammax_conf { beta1: 0.9 beta2: 0.999 } delta: 1e-7",
}


def _updater(type_name):
    from singa_core.plugin_host.host import get_host
    from singa_core.testing import TableLR, updater_conf

    cls = get_host().get("updater", type_name)
    return cls(updater_conf(UPDATERS[type_name]), TableLR(0.05, 0.02))


def _items(updater, rng, states=None):
    from singa_core.updater import UpdateItem

    shapes = [(7, 3), (5,), (300,), (1,)]
    items = []
    for k, s in enumerate(shapes):
        value = _f32(rng, *s)
        state = {n: np.abs(_f32(rng, *s)) for n in updater.init_state(value)}
        items.append(UpdateItem(value, _f32(rng, *s) * 2, state, (1.0, 0.5)[k % 2],
                                (1.0, 2.0, 0.5)[k % 3], (1.0, 0.0)[k % 2]))  # fmt: skip
    return items


def _copy_items(items):
    from singa_core.updater import UpdateItem

    return [UpdateItem(it.value.copy(), it.grad.copy(), {k: v.copy() for k, v in it.state.items()},
                       it.scale, it.lr_scale, it.wd_scale) for it in items]  # fmt: skip


def test_every_updater_runs_its_rule_in_one_kernel():
    from singa_core.plugin_host.host import get_host

    reg = get_host().registries["updater"]
    names = set(reg.entries) | set(reg.user_entries)
    missing = [n for n in names if get_host().get("updater", n).update_kernel is None]
    assert missing == [], missing  # kSGD included: one update-kernel path for all
    assert set(UPDATERS) >= {n for n in names if not n.startswith("kCudnn")}


@pytest.mark.parametrize("type_name", sorted(UPDATERS))
def test_an_updater_kernel_equals_its_apply(emulated, type_name):
    """One launch over all slices (emulated CUDA) gives what apply() gives slice by slice,
    at non-zero weight decay with and without momentum (the kit's check); on the stand-in
    and on standin:cuda the same step is one launch, exact on the former."""
    from singa_core.plugin_host.host import get_host
    from singa_core.testing import TableLR, check_update_kernel, updater_conf

    cls = get_host().get("updater", type_name)
    check_update_kernel(
        lambda **f: cls(updater_conf(UPDATERS[type_name], **f), TableLR(0.05, 0.02))
    )
    updater = _updater(type_name)
    items = _items(updater, np.random.default_rng(3))
    ref = _copy_items(items)
    updater.apply_many(5, ref)
    for code in ("host", "cuda"):
        dev = standin_device(code)
        on_dev = [
            type(it)(dev.asarray(it.value), dev.asarray(it.grad),
                     {k: dev.asarray(v) for k, v in it.state.items()}, it.scale, it.lr_scale,
                     it.wd_scale)
            for it in _copy_items(items)
        ]  # fmt: skip
        with dev.activate(), standin.counting() as c:
            updater.apply_many(5, on_dev)
        assert (c.kernels, c.reads) == (1, 0), (code, c.by_name)
        for a, b in zip(ref, on_dev, strict=True):
            _close(a.value, b.value.get(), 3e-6, f"{type_name} on {code}")


def test_the_kit_catches_an_update_kernel_that_couples_a_decoupled_decay(emulated):
    """The bug of the first seam: a rule whose apply() decouples its weight decay (AdamW,
    Lion) with a kernel whose prologue couples it is right on the CPU and wrong on a GPU;
    check_update_kernel runs the kernel's CUDA code and fails it."""
    from singa_core.testing import TableLR, check_update_kernel, updater_conf
    from singa_core.updater import Updater, define_update_kernel

    body = "T0[j] = T0[j] - rate * (g > 0.0f ? 1.0f : (g < 0.0f ? -1.0f : 0.0f));"
    define_update_kernel("test_decoupled_sgd_wrong", body, states=(), weight_decay="coupled")
    define_update_kernel("test_decoupled_sgd", body, states=(), weight_decay="decoupled")

    class DecoupledSignSGD(Updater):  # Lion without momentum: w -= lr·(sign(g) + wd·w)
        def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
            g = self.prologue(value, grad, scale, wd_scale, weight_decay=False)
            lr = self.lr(step) * lr_scale
            self.decay_weights(value, lr, wd_scale)
            value -= np.float32(lr) * np.sign(g)

    try:
        for kernel, right in (("test_decoupled_sgd", True), ("test_decoupled_sgd_wrong", False)):
            cls = type("Up", (DecoupledSignSGD,), {"update_kernel": kernel})

            def make(cls=cls, **f):
                return cls(updater_conf("", **f), TableLR(0.05))

            if right:
                check_update_kernel(make)
            else:
                with pytest.raises(AssertionError, match="differs from apply"):
                    check_update_kernel(make)
    finally:
        for name in ("test_decoupled_sgd", "test_decoupled_sgd_wrong"):
            K._KERNELS.pop(name, None)
        K._resolved.clear()
