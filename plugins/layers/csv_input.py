"""kCSVInput: reads comma-separated lines from a store (SINGA 0.3 §2.2, input_layer/csv.cc);
batching, cycling, random skip and mean/std as in :mod:`singa_builtins.layers._store_input`.

A value is one line split at any character of ``store_conf.separator`` (default ","; as
0.3's Tokenizer, several characters mean "any of them", and one trailing separator is
allowed). Unless the phase has ``kDeploy`` or ``has_label`` is false, the first token is the
integer label (parsed like ``std::stoi``: an integer, or a number truncated towards zero);
exactly ``prod(store_conf.shape)`` float tokens follow. A mean/std file's first line holds
the vector, with no label. With ``has_label: false`` the layer still has ``aux`` (zeros)
but provides no labels to loss layers (0.3 would hand them its zeros).
"""

from __future__ import annotations

import re

import numpy as np
from singa_builtins.layers._store_input import StoreInputLayer


class CSVInputLayer(StoreInputLayer):
    type_names = ("kCSVInput",)
    placement = "host"  # reads records/files on the CPU; the net copies its output

    def setup(self, srcs):
        sep = self.conf.store_conf.separator
        if not sep:
            raise self.error(
                f"layer '{self.name}': store_conf.separator is empty",
                field="store_conf",
                help="set store_conf.separator to the character(s) between values, e.g. "
                'separator: ","',
            )
        if len(sep) == 1:
            self._split = lambda text: text.split(sep)
        else:
            pattern = re.compile("[" + re.escape(sep) + "]")
            self._split = pattern.split
        self.has_label = bool(self.conf.store_conf.has_label)
        super().setup(srcs)

    def _tokens(self, value: bytes) -> list[str]:
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        toks = self._split(text)
        if len(toks) > 1 and toks[-1] == "":
            toks.pop()  # "a,b," — 0.3's Tokenizer stops at a trailing separator
        return toks

    def parse_batch(self, records, with_label, rows=None, aux=None):
        n = self.rowlen
        want = n + 1 if with_label else n
        rows = self._rows if rows is None else rows
        aux = self.aux if aux is None else aux
        for k, (key, value) in enumerate(records):
            try:
                toks = self._tokens(value)
            except UnicodeDecodeError:
                raise self.bad_record(key, "is not text") from None
            if len(toks) != want:
                what = f"a label and {n} values" if with_label else f"{n} values"
                raise self.count_mismatch(
                    key,
                    max(len(toks) - int(with_label), 0),
                    "values after its label" if with_label else "values",
                    f"has {len(toks)} fields, expected {what} "
                    f"(store_conf.shape {list(self.instance_shape)})",
                )
            if with_label:
                aux[k] = self._label(key, toks[0])
                toks = toks[1:]
            try:
                rows[k] = toks
            except ValueError:
                raise self.bad_record(key, "has a value that is not a number") from None

    def _label(self, key, tok: str) -> int:
        try:
            return int(tok)
        except ValueError:
            pass
        try:
            return int(float(tok))  # std::stoi("3.7") == 3
        except (ValueError, OverflowError):
            raise self.bad_record(key, f"has a label {tok!r} that is not an integer") from None

    def load_vector(self, value):
        return np.array(self._tokens(value), dtype=np.float32)
