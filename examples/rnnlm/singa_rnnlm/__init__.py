"""singa-rnnlm: SINGA 0.3's examples/rnnlm (Mikolov's RNN language model with word classes)
as a singa plugin: the layers kData, kEmbedding, kHidden and kLoss, their proto extension
(``rnnlm.proto``), and the converters ``singa data rnnlm`` / ``singa data
rnnlm-shakespeare`` that write the WordRecord stores the job reads."""

__version__ = "0.1.0"
