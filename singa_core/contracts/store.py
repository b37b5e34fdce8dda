"""Interface of record stores (SINGA's io::Store): sequential (key, value) tuples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KCREATE, KREAD, KAPPEND = 0, 1, 2


class Store:
    """Contract for store plugins, selected by ``StoreProto.backend``.

    Constructed with no arguments, then ``open(path, mode)`` with mode ``KCREATE``, ``KREAD``
    or ``KAPPEND``. ``read()`` returns the next ``(key, value)`` as bytes, or ``None`` at the
    end; ``seek_to_first()`` rewinds; ``write(key, value)`` appends and returns True on
    success. ``position()``/``seek(pos)`` let a resumed job continue where it stopped.
    A path that cannot be opened raises :class:`singa_core.contracts.errors.SingaError`.
    """

    def open(self, path: str, mode: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def read(self) -> tuple[bytes, bytes] | None:  # pragma: no cover
        raise NotImplementedError

    def seek_to_first(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def write(self, key: bytes, value: bytes) -> bool:  # pragma: no cover
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def position(self) -> int:  # pragma: no cover
        raise NotImplementedError

    def seek(self, position: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class RecordBlock:
    """``n`` consecutive tuples of one store with equal key and value lengths: ``keys``
    ``(n, key length)`` and ``values`` ``(n, value length)``, uint8 arrays of their own
    (not views of the store's file). Iterating gives ``(key, value)`` bytes, as ``read``."""

    keys: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def __iter__(self):
        for k, v in zip(self.keys, self.values, strict=True):
            yield k.tobytes(), v.tobytes()

    def __getitem__(self, i: int) -> tuple[bytes, bytes]:
        return self.keys[i].tobytes(), self.values[i].tobytes()
