"""0.3's rnnlm embedding, in brief: row ``i`` of the vocab Param for word index ``i``
(``embedding_conf { vocab_size feature_dim }``); selected by ``user_type: "kEmbedding"``
beside the built-in ``type: kEmbedding``."""

import numpy as np
from singa_core.layer import NeuronLayer, kAggGrad


class RnnlmEmbedding(NeuronLayer):
    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.embedding_conf
        self.vocab = self.create_param(0, (conf.vocab_size, conf.feature_dim), "vocab")
        self.alloc((srcs[0].shape[0], conf.feature_dim))

    def forward(self, phase, srcs):
        self.words = np.asarray(srcs[0].data[:, 0], dtype=np.int64)
        self.data[...] = self.vocab.value[self.words]

    def backward(self, phase, srcs):
        if not phase & kAggGrad:
            self.vocab.grad[...] = 0
        np.add.at(self.vocab.grad, self.words, self.grad)
