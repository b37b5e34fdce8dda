"""kCSVOutput: write each instance of the source's data as a CSV line (SINGA 0.3 §2.5,
output_layer/csv.cc).

``srclayers = [any layer]``. Each forward writes one line per instance of the batch,
``label,v1,...,vd`` — the integer label prefix only when the source provides labels
(``src.labels()`` is not None, e.g. an input layer), the ``d = size/batch`` values formatted
like ``std::to_string`` (``"%f"``: six decimals) — to a ``textfile`` store at
``store_conf.path``, created at the first forward and flushed after every batch. Store,
keys and publishing as in :class:`singa_builtins.layers._records.StoreOutputLayer`. No gradient.

Differences from 0.3: when ``store_conf.backend`` was set, 0.3 assigned the bool
``has_backend()`` to the backend name (a one-character string "\\x01") and failed to create
the store; singa accepts ``backend: "textfile"`` and rejects any other backend with a clear
error. A missing path or output folder is reported at set-up; the file is published when
the layer is closed (see StoreOutputLayer), not written in place.
"""

from __future__ import annotations

from singa_builtins.layers._records import StoreOutputLayer


class CSVOutputLayer(StoreOutputLayer):
    type_names = ("kCSVOutput",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    default_backend = "textfile"

    def check_backend(self, backend: str) -> None:
        if backend != "textfile":
            raise self.error(
                f"layer '{self.name}' (kCSVOutput) writes text lines; backend "
                f'"{backend}" is not supported',
                field="store_conf",
                help='leave store_conf.backend unset or set it to "textfile"; use kRecordOutput '
                "to write RecordProto records to a kvfile store",
            )

    def setup(self, srcs):
        super().setup(srcs)
        self._fmt = ",".join(["%f"] * self.dim)

    def forward(self, phase, srcs):
        src = srcs[0]
        rows = src.data.reshape(self.batchsize, self.dim).tolist()  # Python floats (doubles)
        labels = self.batch_labels(src)
        fmt = self._fmt
        if labels is None:
            lines = [fmt % tuple(row) for row in rows]
        else:
            lines = [
                f"{int(lab)}," + fmt % tuple(row) for lab, row in zip(labels, rows, strict=True)
            ]
        self.write_values(line.encode("ascii") for line in lines)
