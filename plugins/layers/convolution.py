"""kConvolution: SINGA 0.3's mshadow convolution (§2.3).

The same computation as kCConvolution (see ``_conv.py`` for the formulas, parameters and
layout), with a square window: an explicit ``kernel``/``pad``/``stride`` is used for both
axes, otherwise ``kernel_x``/``pad_x``/``stride_x`` (the ``_y`` fields are ignored, as in
0.3).
"""

from __future__ import annotations

from singa_builtins.layers._conv import ConvolutionBase


class ConvolutionLayer(ConvolutionBase):
    type_names = ("kConvolution",)
    placement = "device"
    square = True
