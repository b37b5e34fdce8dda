"""How an array of inputs is matched against the samples a deploy net takes.

A model takes ``(N, *sample_shape)`` raw samples; for images ``sample_shape`` is C×H×W
(channels first, as SINGA's records hold pixels). :func:`conform` accepts exactly that, and
nothing that merely has the right number of values:

* ``layout="NHWC"`` (or ``"channels_last"``; ``singa predict --layout NHWC``) takes images
  as most image tools hold them, ``(N, H, W, C)``, and transposes them; the default is
  ``"NCHW"`` (``"channels_first"``);
* an array that looks channels-last while the layout says channels-first (``(N, 32, 32,
  3)`` for a ``(3, 32, 32)`` model) is refused, naming both fixes;
* a sample without its batch axis (``(784,)`` for a ``(784,)`` model) is refused with
  ``x[None]``;
* axes of size 1 may be added or left out (``(N, 28, 28)`` for a ``(1, 28, 28)`` model);
* any other shape is refused, even when its size matches (``(N, 28, 28)`` for a flat
  ``(784,)`` model, ``(2, 28, 28)`` for ``(784,)``): reshaping by size alone silently
  scrambles what the net sees when the order is not the records'.
"""

from __future__ import annotations

import math

import numpy as np

from singa_core.contracts.errors import SingaError

#: accepted spellings -> the canonical name
LAYOUTS = {
    "NCHW": "NCHW",
    "channels_first": "NCHW",
    "NHWC": "NHWC",
    "channels_last": "NHWC",
}


def layout_name(layout: str | None, where: str = "layout") -> str:
    """The canonical layout name (``NCHW`` or ``NHWC``) of ``layout`` (default ``NCHW``)."""
    if layout is None:
        return "NCHW"
    found = LAYOUTS.get(str(layout)) or LAYOUTS.get(str(layout).upper())
    if found is None:
        raise SingaError(
            f"unknown layout {layout!r}",
            where=where,
            help="give NCHW (channels first, as the records hold images; the default) or "
            "NHWC (channels last, as PIL, OpenCV and TensorFlow hold them)",
        )
    return found


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _nshape(shape) -> str:
    return "(N" + "".join(f", {s}" for s in shape) + ")"


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(int(s) for s in shape if s != 1)


def conform(
    x: np.ndarray,
    sample_shape: tuple[int, ...],
    *,
    layout: str | None = None,
    where: str = "input",
    option: str = "layout='NHWC'",
) -> np.ndarray:
    """``x`` as ``(N, *sample_shape)`` (a view or a transposed copy), or a SingaError saying
    why not and what to give instead. ``option`` is how the caller spells the layout switch
    (``layout='NHWC'`` in Python, ``--layout NHWC`` on the command line)."""
    layout = layout_name(layout, where="layout" if option.startswith("layout") else "--layout")
    s = tuple(int(v) for v in sample_shape)
    if x.ndim == 0:
        raise SingaError(
            "input is a scalar",
            where=where,
            help=f"give an array of shape {_nshape(s)}",
        )
    if layout == "NHWC":
        if len(s) != 3:
            raise SingaError(
                f"{option}: the model's samples {_shape(s)} are not C×H×W images",
                where=where,
                help=f"leave the layout out and give an array of shape {_nshape(s)}",
            )
        c, h, w = s
        if x.ndim == 4 and tuple(x.shape[1:]) == (h, w, c):
            return x.transpose(0, 3, 1, 2)
        if tuple(x.shape) == (h, w, c):
            raise SingaError(
                f"input has shape {_shape(x.shape)}: one image without the batch axis",
                where=where,
                help=f"give x[None] (shape (1, {h}, {w}, {c}))",
            )
        raise SingaError(
            f"input has shape {_shape(x.shape)}; with {option} the model takes "
            f"(N, {h}, {w}, {c}) (height, width, channels)",
            where=where,
            help=f"give (N, {h}, {w}, {c}) images, or leave the layout out for (N, {c}, {h}, {w})",
        )
    per = tuple(int(v) for v in x.shape[1:])
    if per == s:
        return x
    if per and _squeezed(per) == _squeezed(s):
        # only axes of size 1 differ; (1, 28, 28) for a (1, 28, 28) model too: one sample
        # of (28, 28) or of (1, 28, 28) without its batch axis hold the same values
        return x.reshape(x.shape[0], *s)
    if s and tuple(x.shape) == s:
        raise SingaError(
            f"input has shape {_shape(x.shape)}: one sample without the batch axis",
            where=where,
            help=f"give x[None] (shape (1, {', '.join(map(str, s))})) or N samples {_nshape(s)}",
        )
    if len(s) == 3 and per == (s[1], s[2], s[0]) and s[0] != s[2]:
        raise SingaError(
            f"input has shape {_shape(x.shape)}: channels last (N, height, width, "
            f"channels); the model takes channels first {_nshape(s)}",
            where=where,
            help=f"pass {option} to have it transposed, or give x.transpose(0, 3, 1, 2)",
        )
    size = math.prod(s)
    if per and math.prod(per) == size:
        what = (
            f"samples of {_shape(per)} have the {size} values of the model's {_shape(s)} "
            "samples but not their shape"
        )
        if len(s) == 1:
            fix = (
                f"flatten each sample yourself, x.reshape(len(x), {size}), if that row-major "
                "order is the order of the training records"
            )
        else:
            fix = f"give samples of shape {_shape(s)}, e.g. x.reshape(len(x), *{_shape(s)})"
        raise SingaError(
            f"input has shape {_shape(x.shape)}: {what}; reshaping by size alone is refused",
            where=where,
            help=fix,
        )
    raise SingaError(
        f"input has shape {_shape(x.shape)}, but the model takes {_nshape(s)}: N samples "
        f"of {_shape(s)}",
        where=where,
        help=f"give raw samples of shape {_shape(s)}, as the data layer reads them from records",
    )
