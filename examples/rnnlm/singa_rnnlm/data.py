"""kData: 0.3's rnnlm DataLayer, windows of words read from a WordRecord store.

``[data_conf] { path, max_window, backend (default "kvfile") }``. The store holds one
:class:`~singa_rnnlm.rnnlm_pb2.WordRecord` per word of the corpus, in text order (written by
``singa data rnnlm`` / ``singa data rnnlm-shakespeare``).

``data`` has ``max_window + 1`` rows of four floats, ``(word_index, class_index,
class_start, class_end)`` (0.3's layout; ``records`` holds the same as integers). Each
forward moves the last word of the previous window to slot 0 and reads up to
``max_window`` new words into slots 1, 2, ...; it stops early after a ``"</s>"`` (word 0,
the end of a sentence). ``window`` is the number of new words: slots ``0 .. window-1``
are the inputs and slots ``1 .. window`` the words to predict. At the end of the store
reading continues from its first record (cycling forever, as 0.3).

Differences from 0.3:

* before the first window slot 0 holds ``"</s>"`` (0.3 put the store's first word there, so
  that word was never predicted in the first pass and every later pass started
  differently); one pass of exactly as many windows as the store has therefore predicts
  every word once, the same in every pass;
* the store is opened and its first record checked in ``setup``, so a missing or wrong file
  is reported before training; a record that does not parse, or whose class range does not
  hold its word, is an error naming the file and key (0.3 CHECK-failed in the loss layer);
* ``max_window`` must be positive (0.3 read an unset field as 0 and produced empty windows);
* ``state_dict`` keeps the store position and slot 0, so a resumed job continues with the
  very next word.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from singa_core.errors import SingaError
from singa_core.layer import InputLayer
from singa_core.store import KREAD

from singa_rnnlm import rnnlm_pb2
from singa_rnnlm._common import error_at, extension, extension_location

END_OF_SENTENCE = 0  # word index of "</s>"


def open_store(layer, backend: str, path: str, mode: int):
    """A ``backend`` store plugin opened at ``path``; errors located at ``[data_conf]``."""
    get = layer.ctx.get_plugin
    if get is None:  # a layer built outside a net (tests)
        from singa_core.plugin_host.host import get_host

        get = get_host().get
    try:
        store = get("store", backend)()
        store.open(path, mode)
    except SingaError as err:
        raise err.located(extension_location(layer, "data_conf")) from None
    return store


class RnnlmDataLayer(InputLayer):
    type_names = ("kData",)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = extension(
            self, rnnlm_pb2.data_conf, "data_conf", 'path: "train_data.bin" max_window: 10'
        )
        self.path, self.backend = conf.path, conf.backend
        self.max_window = int(conf.max_window)
        if not self.path:
            raise error_at(
                self,
                "data_conf",
                f"layer '{self.name}': [data_conf] has no path",
                help='add `path: "examples/rnnlm/train_data.bin"`',
            )
        if self.max_window <= 0:
            raise error_at(
                self,
                "data_conf",
                f"layer '{self.name}': [data_conf] max_window must be positive, got "
                f"{self.max_window}",
                help="0.3's example uses `max_window: 10`",
            )
        self.store = open_store(self, self.backend, self.path, KREAD)
        rows = self.max_window + 1
        self.alloc((rows, 4), grad=False)
        self.records = np.zeros((rows, 4), dtype=np.int64)
        self.window = 0
        self._word = rnnlm_pb2.WordRecord()
        self._first = True
        # read one record now: an empty store or a file of another kind fails before step 0
        self._next()
        self.store.seek_to_first()

    # -- reading -------------------------------------------------------------------------
    def _bad(self, key: bytes, message: str) -> SingaError:
        return error_at(
            self,
            "data_conf",
            f"layer '{self.name}': record '{key.decode('utf-8', 'replace')}' of "
            f"'{self.path}' {message}",
            help="the store must hold WordRecords; make it with `singa data rnnlm` "
            "(or `singa data rnnlm-shakespeare`)",
        )

    def _next(self) -> tuple[int, int, int, int]:
        rec = self.store.read()
        if rec is None:
            self.store.seek_to_first()
            rec = self.store.read()
            if rec is None:
                raise error_at(
                    self, "data_conf", f"layer '{self.name}': store '{self.path}' has no records"
                )
        key, value = rec
        word = self._word
        try:
            word.ParseFromString(value)
        except DecodeError:
            raise self._bad(key, "is not a WordRecord") from None
        fields = (word.word_index, word.class_index, word.class_start, word.class_end)
        if not (0 <= fields[2] <= fields[0] < fields[3] and fields[1] >= 0):
            raise self._bad(
                key,
                f"is inconsistent: word_index {fields[0]}, class_index {fields[1]}, class "
                f"range [{fields[2]}, {fields[3]})",
            )
        return fields

    def forward(self, phase, srcs):
        rec = self.records
        if self._first:  # slot 0 before the first window: the end of a sentence
            self._first = False
            rec[0] = (END_OF_SENTENCE, 0, 0, 0)
        else:
            rec[0] = rec[self.window]
        self.window = self.max_window
        for t in range(1, self.max_window + 1):
            rec[t] = self._next()
            if rec[t, 0] == END_OF_SENTENCE:
                self.window = t
                break
        self.data[...] = rec

    # -- resume --------------------------------------------------------------------------
    def state_dict(self):
        return {
            "position": int(self.store.position()),
            "first": self._first,
            "slot0": [int(v) for v in self.records[self.window]],
        }

    def load_state_dict(self, state):
        if "position" in state:
            self.store.seek(int(state["position"]))
            self._first = bool(state["first"])
            self.records[0] = state["slot0"]
            self.window = 0  # the next forward moves slot 0 (itself) to slot 0
