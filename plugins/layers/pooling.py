"""kPooling: SINGA 0.3's mshadow pooling (§2.3), MAX or AVG.

Formulas and layout are in ``_pool.py``. The window is square: an explicit
``kernel``/``pad``/``stride`` is used for both axes, otherwise the ``_x`` fields (the
``_y`` fields are ignored, as in 0.3). Two deviations from 0.3's mshadow code, both
because its results were wrong (docs/compat.md): MAX backward routes the gradient to the
first maximum of each window instead of to every input equal to the maximum (which
over-counts ties, e.g. MNIST's constant background), and padding is supported (0.3
silently required pad 0).
"""

from __future__ import annotations

from singa_builtins.layers._pool import PoolingBase


class PoolingLayer(PoolingBase):
    type_names = ("kPooling",)
    placement = "device"
    square = True
