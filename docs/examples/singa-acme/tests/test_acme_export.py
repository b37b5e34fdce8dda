import numpy as np
from singa_core.testing import check_onnx_export

from acme.swish import SwishLayer


def test_swish_exports():
    check_onnx_export(
        SwishLayer,
        'name: "s" [acme.swish_conf] { beta: 1.5 }',
        [np.random.default_rng(0).standard_normal((4, 8))],
    )
