"""random_skip costs time bounded by the store's size, not by its value (issue 38, point 5:
10^7 took 111 s on a 200-line CSV, 10^9 ran past 60 s): whole passes over a cycling store
change nothing, so after one counted pass only ``n % size`` more records are read — and the
next record is the one ``n`` plain reads would give."""

from __future__ import annotations

import pytest
from conftest import singa_ok as ok
from singa_builtins.layers._records import skip_records

from singa_core.errors import SingaError
from singa_core.store import Store


class ListStore(Store):
    """An in-memory store that counts its reads."""

    def __init__(self, n: int) -> None:
        self.records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
        self.i = 0
        self.reads = 0

    def read(self):
        self.reads += 1
        if self.i >= len(self.records):
            return None
        self.i += 1
        return self.records[self.i - 1]

    def seek_to_first(self) -> None:
        self.i = 0

    def position(self) -> int:
        return self.i


class FakeLayer:
    """What the input layers' ``_next`` does: read, rewinding at the end."""

    def __init__(self, store) -> None:
        self.store = store

    def _next(self):
        rec = self.store.read()
        if rec is None:
            self.store.seek_to_first()
            rec = self.store.read()
            if rec is None:
                raise SingaError("store has no records", where="store_conf")
        return rec


def _plain(size, start, n):
    layer = FakeLayer(ListStore(size))
    for _ in range(start):
        layer._next()
    for _ in range(n):
        layer._next()
    return layer._next()


@pytest.mark.parametrize("size", [1, 2, 7, 200])
@pytest.mark.parametrize("start", [0, 1, 5])
def test_the_next_record_is_that_of_n_plain_reads(size, start):
    for n in [*range(0, 3 * size + 3), 10**6 + 3, 10**9, 10**12 + 1]:
        layer = FakeLayer(ListStore(size))
        for _ in range(start):
            layer._next()
        layer.store.reads = 0
        skip_records(layer, n)
        assert layer.store.reads <= 3 * size + 3, (size, start, n)  # bounded, whatever n
        got = layer._next()
        assert got == layer.store.records[(start + n) % size], (size, start, n)
        if n <= 10**6 + 3:  # the plain loop, for the values it can afford
            assert got == _plain(size, start, n), (size, start, n)


def test_an_empty_store_is_the_layer_s_error():
    layer = FakeLayer(ListStore(0))
    layer.ctx = type("Ctx", (), {"locate": staticmethod(lambda field: f"job.conf ({field})")})
    with pytest.raises(SingaError, match="has no records") as exc:
        skip_records(layer, 10**9)
    assert exc.value.where == "store_conf"


def test_a_job_with_random_skip_1e9_trains(small_job):
    conf, ws = small_job(steps=3)
    text = conf.read_text().replace("random_skip: 10", "random_skip: 1000000000")
    conf.write_text(text)
    ok("train", conf, "-q", "--seed", "5")
    assert (ws / "checkpoint" / "step3-worker0").exists()
