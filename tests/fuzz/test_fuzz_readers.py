"""Fuzzing the readers of persisted bytes (issue 11 point 6): kvfile and textfile stores,
BlobProtos checkpoints and ``.state.npz`` training states. Mutations of valid files and
arbitrary bytes may only end in the documented error, :class:`SingaError` (naming the file),
within 5 s of CPU time; never another exception.
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import byte_mutation, count, fuzz_settings, time_limit, write_counts
from hypothesis import given
from hypothesis import strategies as st

from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.running import checkpoint as ckpt
from singa_core.schema import common_pb2
from singa_core.store import KCREATE, KREAD

MAX_RECORDS = 10_000


@pytest.fixture(scope="module", autouse=True)
def _counts():
    yield
    write_counts()


def _record(label: int, pixels: bytes) -> bytes:
    r = common_pb2.RecordProto(label=label, shape=[len(pixels)], pixel=pixels)
    return r.SerializeToString()


def _valid_store(tmp_path_factory, backend: str, records) -> bytes:
    path = tmp_path_factory.mktemp(backend) / "store"
    store = get_host().get("store", backend)()
    store.open(str(path), KCREATE)
    for k, v in records:
        store.write(k, v)
    store.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def kvfile_seed(tmp_path_factory) -> bytes:
    rng = np.random.default_rng(0)
    recs = [(f"{i:05d}".encode(), _record(i % 10, rng.bytes(16))) for i in range(6)]
    return _valid_store(tmp_path_factory, "kvfile", recs)


@pytest.fixture(scope="module")
def textfile_seed(tmp_path_factory) -> bytes:
    recs = [(str(i).encode(), f"{i % 3},0.5,{i}.25,-1e3".encode()) for i in range(6)]
    return _valid_store(tmp_path_factory, "textfile", recs)


@pytest.fixture(scope="module")
def params_seed() -> bytes:
    rng = np.random.default_rng(1)
    return ckpt.encode_params(
        [
            ckpt.ParamRecord("0#w", 7, rng.normal(size=(3, 4)).astype(np.float32)),
            ckpt.ParamRecord("0#b", 7, np.zeros(3, np.float32)),
        ]
    )


@pytest.fixture(scope="module")
def state_seed() -> bytes:
    state = ckpt.TrainingState(
        step=7,
        meta={"seed": 3, "updater": "kSGD", "layers": {"kTrain": {"data": {"pos": 5}}}},
        arrays={"0#w::history": np.ones((3, 4), np.float32)},
    )
    return ckpt.encode_state(state)


def _bytes(seed: bytes):
    """Mutations of a valid file, or arbitrary bytes."""
    return st.one_of(byte_mutation(seed), byte_mutation(seed), st.binary(max_size=512))


def _read_store(tmp_path, backend: str, data: bytes) -> None:
    path = tmp_path / "store"
    path.write_bytes(data)
    store = get_host().get("store", backend)()
    try:
        with time_limit():
            store.open(str(path), KREAD)
            for _ in range(MAX_RECORDS):
                rec = store.read()
                if rec is None:
                    break
                assert isinstance(rec[0], bytes) and isinstance(rec[1], bytes)
            store.seek_to_first()
            store.seek(store.position())
    except SingaError as err:
        assert str(path) in err.format(), err.format()
    finally:
        store.close()


@fuzz_settings(120)
@given(data=st.data())
def test_kvfile_bytes(tmp_path_factory, kvfile_seed, data):
    _read_store(tmp_path_factory.mktemp("kv"), "kvfile", data.draw(_bytes(kvfile_seed)))
    count("kvfile bytes")


@fuzz_settings(120)
@given(data=st.data())
def test_textfile_bytes(tmp_path_factory, textfile_seed, data):
    _read_store(tmp_path_factory.mktemp("txt"), "textfile", data.draw(_bytes(textfile_seed)))
    count("textfile bytes")


@fuzz_settings(120)
@given(data=st.data())
def test_blobprotos_bytes(tmp_path_factory, params_seed, data):
    path = tmp_path_factory.mktemp("ck") / "step7-worker0"
    path.write_bytes(data.draw(_bytes(params_seed)))
    try:
        with time_limit():
            records = ckpt.read_params(path)
        for r in records:  # what a loaded checkpoint promises its users
            assert isinstance(r.name, str) and isinstance(r.version, int)
            assert r.value.dtype == np.float32
    except SingaError as err:
        assert str(path) in err.format(), err.format()
    count("BlobProtos bytes")


@fuzz_settings(120)
@given(data=st.data())
def test_state_npz_bytes(tmp_path_factory, state_seed, data):
    path = tmp_path_factory.mktemp("st") / "step7-worker0.state.npz"
    path.write_bytes(data.draw(_bytes(state_seed)))
    try:
        with time_limit():
            state = ckpt.read_state(path)
        assert isinstance(state.step, int) and isinstance(state.meta, dict)
        for a in state.arrays.values():
            assert isinstance(a, np.ndarray)
    except SingaError as err:
        assert str(path) in err.format(), err.format()
    count(".state.npz bytes")
