"""The ``singa`` entry point of singa-rnnlm: what 0.3's examples/rnnlm/main.cc registered
(``driver.RegisterLayer<..., std::string>("kData")`` etc.), plus the data converters."""

from __future__ import annotations

from singa_core import hookimpl

from singa_rnnlm.converters import RnnlmConverter, RnnlmShakespeareConverter
from singa_rnnlm.data import RnnlmDataLayer
from singa_rnnlm.embedding import RnnlmEmbeddingLayer
from singa_rnnlm.hidden import RnnlmHiddenLayer
from singa_rnnlm.loss import RnnlmLossLayer

#: the singa plugin API these modules were written for
SINGA_PLUGIN_API = ">=1,<2"


@hookimpl
def singa_register_layers(register):
    # user_type names (job.conf: `user_type: "kEmbedding"`), a namespace of their own next to
    # the built-in enum types (`type: kEmbedding` is singa's built-in embedding layer)
    register("kData", RnnlmDataLayer, user_type=True)
    register("kEmbedding", RnnlmEmbeddingLayer, user_type=True)
    register("kHidden", RnnlmHiddenLayer, user_type=True)
    register("kLoss", RnnlmLossLayer, user_type=True)


@hookimpl
def singa_register_datasets(register):
    register("rnnlm", RnnlmConverter)
    register("rnnlm-shakespeare", RnnlmShakespeareConverter)
