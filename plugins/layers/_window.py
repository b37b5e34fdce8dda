"""Sliding-window geometry and the batch-innermost memory layout shared by the
convolution and pooling layers.

Window fields (SINGA 0.3 §1.9, ConvolutionProto/PoolingProto): when ``kernel`` (``pad``,
``stride``) is set explicitly it is used for both axes, else ``kernel_y``/``kernel_x``
(height/width). The "square" layer types (kConvolution, kPooling) use the ``_x`` value for
both axes, as 0.3's mshadow layers do. Output size is SINGA's floor rule
``(H + 2·pad − k) // stride + 1``.

Layout: the spatial layers keep their arrays *batch-innermost*, i.e. in memory as
``(C, H, W, B)``, and expose them as the NCHW view ``buf.transpose(3, 0, 1, 2)``. With
the batch innermost, a convolution is one big GEMM over ``oH·oW·B`` columns and every
window position of im2col/col2im/pooling is a copy of long contiguous runs. Elementwise
layers allocate with :meth:`Layer.alloc_like` and so keep the layout; any consumer that
needs NCHW order gets a correct (strided) view.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from singa_core.device import default_device
from singa_core.kernels import define_kernel
from singa_core.memory import charge as charge_memory
from singa_core.param import DTYPE


@dataclass(frozen=True)
class Window:
    kh: int
    kw: int
    ph: int
    pw: int
    sh: int
    sw: int

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        return (h + 2 * self.ph - self.kh) // self.sh + 1, (
            w + 2 * self.pw - self.kw
        ) // self.sw + 1

    @property
    def positions(self) -> list[tuple[int, int]]:
        """Kernel offsets ``(i, j)`` in row-major order."""
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]


def window_from_conf(layer, conf, conf_field: str, *, square: bool) -> Window:
    """Read kernel/pad/stride from ``conf`` (a ConvolutionProto or PoolingProto)."""

    def pick(name: str) -> tuple[int, int]:
        if conf.HasField(name):
            v = int(getattr(conf, name))
            return v, v
        x = int(getattr(conf, f"{name}_x"))
        return (x, x) if square else (int(getattr(conf, f"{name}_y")), x)

    kh, kw = pick("kernel")
    ph, pw = pick("pad")
    sh, sw = pick("stride")
    if min(kh, kw) <= 0 or min(sh, sw) <= 0 or min(ph, pw) < 0:
        bad = "kernel" if min(kh, kw) <= 0 else "stride" if min(sh, sw) <= 0 else "pad"
        raise layer.error(
            f"layer '{layer.name}': kernel and stride must be positive and pad >= 0, got "
            f"kernel {kh}x{kw}, stride {sh}x{sw}, pad {ph}x{pw}",
            field=_window_field(conf, conf_field, bad, square),
            help=f"set {conf_field}.{bad} to "
            + ("a number >= 0 (0: no padding)" if bad == "pad" else "a positive number"),
        )
    return Window(kh, kw, ph, pw, sh, sw)


def spatial_input(layer, src) -> tuple[int, int, int, int]:
    """``(B, C, H, W)`` of a source; a 3-D ``[B, H, W]`` source counts as one channel."""
    shape = src.data.shape if src.data is not None else ()
    if len(shape) == 3:
        return shape[0], 1, shape[1], shape[2]
    if len(shape) != 4:
        raise layer.error(
            f"layer '{layer.name}' needs a [batch, channels, height, width] source; "
            f"'{src.name}' has shape {list(shape)}",
            field="srclayers",
            help="give the input layer a 3-value store_conf.shape (e.g. `shape: 1 shape: 28 "
            "shape: 28`)",
        )
    return shape


def check_output_size(layer, win: Window, h: int, w: int, conf_field: str) -> tuple[int, int]:
    oh, ow = win.out_size(h, w)
    if oh <= 0 or ow <= 0:
        raise layer.error(
            f"layer '{layer.name}': a {win.kh}x{win.kw} window (pad {win.ph}x{win.pw}) does "
            f"not fit its {h}x{w} input",
            field=conf_field,
            help="use a smaller kernel or more padding",
        )
    return oh, ow


def batch_innermost(
    c: int, h: int, w: int, b: int, *, layer=None, kind: str = "data"
) -> tuple[np.ndarray, np.ndarray]:
    """A zeroed ``(C, H, W, B)`` buffer and its NCHW view (charged to the job's memory
    estimate as ``layer``'s ``kind`` first, when a layer is given)."""
    if layer is not None:
        charge_memory(layer, kind, (c, h, w, b))
    device = layer.device if layer is not None else default_device()
    buf = device.zeros((c, h, w, b), dtype=DTYPE)
    return buf, buf.transpose(3, 0, 1, 2)


def as_chwn(x: np.ndarray, b: int, c: int, h: int, w: int) -> np.ndarray:
    """The ``(C, H, W, B)`` view of an NCHW (or ``[B, H, W]``) array; a contiguous array
    when ``x`` is a batch-innermost view, a strided one otherwise."""
    return x.reshape(b, c, h, w).transpose(1, 2, 3, 0)


def window_slice(win: Window, i: int, j: int, oh: int, ow: int) -> tuple[slice, ...]:
    """Index of the inputs that window offset ``(i, j)`` reads, in a padded CHWN array."""
    return (
        slice(None),
        slice(i, i + win.sh * (oh - 1) + 1, win.sh),
        slice(j, j + win.sw * (ow - 1) + 1, win.sw),
        slice(None),
    )


def _window_field(conf, conf_field: str, name: str, square: bool) -> str:
    """The field that set a window size: ``kernel``, or ``kernel_x``/``kernel_y`` where the
    configuration gives those instead."""
    if not square:
        for suffix in ("_y", "_x"):
            if conf.HasField(name + suffix):
                return f"{conf_field}.{name}{suffix}"
    if conf.HasField(name):
        return f"{conf_field}.{name}"
    return conf_field


# -- what the one-launch window kernels share ------------------------------------------------
def padded_copy(x: np.ndarray, ph: int, pw: int, fill: float = 0.0) -> np.ndarray:
    """A new ``(C, H + 2·ph, W + 2·pw, B)`` host array: the CHWN view ``x`` in the middle,
    ``fill`` around it (the host reference of the window kernels)."""
    c, h, w, b = x.shape
    out = np.full((c, h + 2 * ph, w + 2 * pw, b), fill, dtype=DTYPE)
    out[:, ph : ph + h, pw : pw + w] = x
    return out


def window_launch_args(img, oh: int, ow: int, kh, kw, ph, pw, sh, sw) -> tuple:
    """The geometry a window kernel takes: C, H, W, B of the CHWN view ``img``, the output
    size, the window (int32), then ``img``'s strides in elements (int64)."""
    ints = tuple(np.int32(v) for v in (*img.shape, oh, ow, kh, kw, ph, pw, sh, sw))
    return ints + tuple(np.int64(s // img.itemsize) for s in img.strides)


# -- which algorithm a device runs ------------------------------------------------------------
def _host_window_paths() -> bool:
    """The host: False, the convolution and pooling layers run their BLAS and numba paths
    (row columns, per-offset passes), fastest on a CPU."""
    return False


def _one_launch_window_paths() -> bool:
    """A GPU: True, each window operation is one launch (im2col, col2im, pooling), since
    there every launch costs the host more than the work it does."""
    return True


define_kernel(
    "window_kernels",
    host=_host_window_paths,
    cuda=_one_launch_window_paths,
    composite=True,
    doc="whether convolution and pooling use their one-launch window kernels",
)
