"""kCPooling: SINGA 0.3's Caffe-style pooling (§2.3), MAX or AVG; also serves the cuDNN
type name kCudnnPool on the CPU.

Formulas and layout are in ``_pool.py``. The window honours both axes (``kernel_y``/
``kernel_x`` etc. unless ``kernel``/``pad``/``stride`` is set for both). 0.3 passed
``pad_y``/``stride_y`` for both axes in some of its kernels; here each axis uses its own
values (identical for the square windows of every shipped example). As kCudnnPool, AVG
divides by the full window size like kCPooling, where cuDNN excluded padding from the
count (only differs when ``pad > 0``).
"""

from __future__ import annotations

from singa_builtins.layers import CUDNN_ALIAS_NOTE
from singa_builtins.layers._pool import PoolingBase


class CPoolingLayer(PoolingBase):
    type_names = ("kCPooling", "kCudnnPool")
    placement = "device"
    alias_note = CUDNN_ALIAS_NOTE
    square = False
