"""Straightforward float64 references for convolution and pooling (loops over the output
positions), and sources in the batch-innermost layout, used by the spatial layer tests."""

from __future__ import annotations

import numpy as np

from singa_core.testing import SourceLayer


def pad4(x, ph, pw, value=0.0):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def out_size(h, k, p, s):
    return (h + 2 * p - k) // s + 1


def conv_forward(x, w, b, kh, kw, ph, pw, sh, sw):
    """``x`` [B,C,H,W], ``w`` [F, C·kh·kw] (channel, row, column order), ``b`` [F]."""
    x = np.asarray(x, np.float64)
    bsz, c, h, wd = x.shape
    f = w.shape[0]
    wk = np.asarray(w, np.float64).reshape(f, c, kh, kw)
    xp = pad4(x, ph, pw)
    oh, ow = out_size(h, kh, ph, sh), out_size(wd, kw, pw, sw)
    y = np.zeros((bsz, f, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            y[:, :, i, j] = np.einsum("bcuv,fcuv->bf", patch, wk) + b
    return y


def conv_backward(x, w, g, kh, kw, ph, pw, sh, sw):
    """Gradients ``(gx, gw, gb)`` for the output gradient ``g``."""
    x = np.asarray(x, np.float64)
    bsz, c, h, wd = x.shape
    f = w.shape[0]
    wk = np.asarray(w, np.float64).reshape(f, c, kh, kw)
    xp = pad4(x, ph, pw)
    gxp = np.zeros_like(xp)
    gw = np.zeros_like(wk)
    oh, ow = g.shape[2:]
    for i in range(oh):
        for j in range(ow):
            sl = (slice(None), slice(None), slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw))
            gw += np.einsum("bf,bcuv->fcuv", g[:, :, i, j], xp[sl])
            gxp[sl] += np.einsum("bf,fcuv->bcuv", g[:, :, i, j], wk)
    gx = gxp[:, :, ph : ph + h, pw : pw + wd]
    return gx, gw.reshape(f, -1), g.sum(axis=(0, 2, 3))


def pool_forward_backward(x, g, method, kh, kw, ph, pw, sh, sw):
    """``(y, gx)``: MAX routes to the first maximum in row-major order; AVG divides by
    ``kh·kw``. ``g`` may be None (then gx is None)."""
    x = np.asarray(x, np.float64)
    bsz, c, h, wd = x.shape
    xp = pad4(x, ph, pw, -np.inf if method == "MAX" else 0.0)
    oh, ow = out_size(h, kh, ph, sh), out_size(wd, kw, pw, sw)
    y = np.zeros((bsz, c, oh, ow))
    gxp = np.zeros_like(xp)
    for n in range(bsz):
        for ch in range(c):
            for i in range(oh):
                for j in range(ow):
                    win = xp[n, ch, i * sh : i * sh + kh, j * sw : j * sw + kw]
                    if method == "MAX":
                        u, v = np.unravel_index(int(np.argmax(win)), win.shape)
                        y[n, ch, i, j] = win[u, v]
                        if g is not None:
                            gxp[n, ch, i * sh + u, j * sw + v] += g[n, ch, i, j]
                    else:
                        y[n, ch, i, j] = win.sum() / (kh * kw)
                        if g is not None:
                            gxp[n, ch, i * sh : i * sh + kh, j * sw : j * sw + kw] += g[
                                n, ch, i, j
                            ] / (kh * kw)
    gx = None if g is None else gxp[:, :, ph : ph + h, pw : pw + wd]
    return y, gx


def batch_innermost_copy(x):
    """``x`` as a strided NCHW view of a batch-innermost (C, H, W, B) buffer (on the device
    in effect, see singa_core.device.using_device)."""
    from singa_core.device import default_device, to_host

    inner = np.ascontiguousarray(np.asarray(to_host(x), np.float32).transpose(1, 2, 3, 0))
    return default_device().asarray(inner).transpose(3, 0, 1, 2)


def strided_source(x) -> SourceLayer:
    """A SourceLayer whose data and grad are batch-innermost NCHW views (what convolution
    and pooling layers hand on)."""
    src = SourceLayer(x)
    src.data = batch_innermost_copy(x)
    src.grad = np.zeros_like(src.data)
    assert not src.data.flags.c_contiguous and src.grad.strides == src.data.strides
    return src
