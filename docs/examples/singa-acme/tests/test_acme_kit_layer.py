import numpy as np
from singa_core.testing import GradientChecker, SourceLayer, check_layer

from acme.focal_loss import FocalLossLayer


def test_prelu_and_focal_loss_pass_the_kit():
    x = np.random.default_rng(0).standard_normal((4, 6))
    check_layer(
        "kPReLU",
        'name: "act" user_type: "kPReLU"',
        [x],
        shape=(4, 6),
        checker=GradientChecker(kink=0.0, kink_range=2e-2),
    )  # skip |x| < 0.02
    # a loss layer: a label source that takes no gradient
    y = np.array([0, 5, 2, 3])
    check_layer(FocalLossLayer, 'name: "loss"', [x, SourceLayer(labels=y, grad=False)])
