"""The entry point: registers acme's layers and updater."""

from singa_core import hookimpl

from acme.dense import DenseLayer
from acme.embedding import RnnlmEmbedding
from acme.focal_loss import FocalLossLayer
from acme.prelu import PReLULayer
from acme.scale_run import FooScale
from acme.sign_momentum import SignMomentumUpdater
from acme.swish import SwishLayer


@hookimpl
def singa_register_layers(register):
    register("kEmbedding", RnnlmEmbedding)  # user_type: "kEmbedding" (as in 0.3)
    register("kPReLU", PReLULayer)
    register("kDense", DenseLayer)
    register("kSwish", SwishLayer)
    register("kFocalLoss", FocalLossLayer)
    register("kFooScale", FooScale)


@hookimpl
def singa_register_updaters(register):
    register("kSignMomentum", SignMomentumUpdater)
