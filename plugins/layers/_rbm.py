"""Shared base of kRBMVis and kRBMHid (SINGA 0.3 §2.3 RBMVisLayer/RBMHidLayer, §5.3 CD).

An RBM is two layers that read each other: the visible layer (srclayers = [input, hidden])
and the hidden layer (srclayers = [visible]). Both hold ``weight`` W shaped ``(hdim, vdim)``
(param 0; the hidden layer's normally ``share_from``s the visible one's) and a bias (param 1).
Each keeps the four blobs of 0.3's ``datavec``: ``pos_data``, ``neg_data``, ``neg_sample``,
``pos_sample``; ``data`` is ``pos_data``. The net orders the pair by the first source only
(``order_after_first_src_only``), so the visible layer comes before the hidden one.

Neither layer takes part in back-propagation (``grad_for`` is None): the CD worker (kCD) calls
``forward`` with ``kPositive`` / ``kNegative`` and then ``backward`` (with ``kTrain``), which
writes the CD update direction into the Params' ``grad``.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import Layer
from singa_core.memory import charge_draws


class RBMLayer(Layer):
    """Common parts: configuration, the four blobs, sampling, no back-propagation."""

    # the contrastive-divergence phases have no prediction of their own: an RBM's features
    # are predicted by the auto-encoder built from it (examples/rbm/autoencoder.conf)
    deploy_role = None

    order_after_first_src_only = True

    def read_conf(self) -> None:
        rbm = self.conf.rbm_conf
        if not self.conf.HasField("rbm_conf") or not rbm.HasField("hdim") or rbm.hdim <= 0:
            raise self.error(
                f"layer '{self.name}' ({type(self).__name__}) needs a positive "
                "rbm_conf.hdim (the number of hidden units)",
                field="rbm_conf.hdim",
                help="add e.g. `rbm_conf { hdim: 100 }`",
            )
        self.hdim = int(rbm.hdim)
        self.gaussian = bool(rbm.gaussian)

    def alloc_blobs(self, batch: int, dim: int) -> None:
        self.alloc((batch, dim), grad=False)
        self.pos_data = self.data
        self.neg_data = np.zeros_like(self.data)
        self.pos_sample = np.zeros_like(self.data)
        self.neg_sample = np.zeros_like(self.data)
        self._noise = np.zeros_like(self.data)  # scratch for the random draws
        charge_draws(self)  # its draws: numba's compiler on the host

    def sample(self, prob: np.ndarray, out: np.ndarray, gaussian: bool) -> np.ndarray:
        """Binary units: ``out ~ Bernoulli(prob)``; gaussian units: ``prob + N(0, 1)``.

        Drawn in float32 into a scratch buffer (no per-step allocation)."""
        noise = self._noise if self._noise.shape == prob.shape else np.empty_like(prob)
        if gaussian:
            self.draw(noise, "standard_normal")  # on the host: the same draws on any device
            np.add(prob, noise, out=out)
        else:
            self.draw(noise, "random")
            np.less(noise, prob, out=out)
        return out

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        return None
