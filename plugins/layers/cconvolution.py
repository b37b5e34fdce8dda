"""kCConvolution: SINGA 0.3's Caffe-style (im2col) convolution (§2.3), also serving the
cuDNN type name kCudnnConv on the CPU.

Formulas, parameters and layout are in ``_conv.py``. The window honours both axes: an
explicit ``kernel``/``pad``/``stride`` is used for both, otherwise ``kernel_y``/``kernel_x``
(height/width) and likewise for pad and stride. ``workspace_byte_limit`` (cuDNN only) is
ignored.
"""

from __future__ import annotations

from singa_builtins.layers import CUDNN_ALIAS_NOTE
from singa_builtins.layers._conv import ConvolutionBase


class CConvolutionLayer(ConvolutionBase):
    type_names = ("kCConvolution", "kCudnnConv")
    placement = "device"
    alias_note = CUDNN_ALIAS_NOTE
    square = False
