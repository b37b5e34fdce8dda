"""Fuzzing the readers of Caffe's persisted bytes (issue 24): Datum values of an LMDB
(kLMDBData) and BlobProto mean files (kRGBImage's meanfile). Any bytes give a parsed
message or a ValueError with the reason, never another exception. (LMDB's own page format
is read by liblmdb, which trusts its file; it is not fuzzed here.)"""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import byte_mutation, count, fuzz_settings, time_limit
from hypothesis import given
from hypothesis import strategies as st
from singa_builtins._caffe import BlobProto, Datum, blob_values, parse_datum
from singa_builtins.layers._records import load_mean_file


@pytest.fixture(scope="module")
def datum_seed() -> bytes:
    return Datum(channels=1, height=3, width=3, data=bytes(range(9)), label=7).SerializeToString()


@pytest.fixture(scope="module")
def blob_seed() -> bytes:
    blob = BlobProto(num=1, channels=1, height=2, width=2)
    blob.data.extend([0.5, 1.5, 2.5, 3.5])
    return blob.SerializeToString()


def _bytes(seed: bytes):
    return st.one_of(byte_mutation(seed), byte_mutation(seed), st.binary(max_size=256))


@fuzz_settings(150)
@given(data=st.data())
def test_datum_bytes(datum_seed, data):
    value = data.draw(_bytes(datum_seed))
    with time_limit():
        try:
            d = parse_datum(value)
        except ValueError as exc:
            assert str(exc)
        else:
            assert d.encoded or d.channels * d.height * d.width == len(d.data) + len(d.float_data)
    count("caffe datum bytes")


@fuzz_settings(150)
@given(data=st.data())
def test_mean_binaryproto_bytes(tmp_path_factory, blob_seed, data):
    path = tmp_path_factory.mktemp("mean") / "mean.binaryproto"
    path.write_bytes(data.draw(_bytes(blob_seed)))
    with time_limit():
        try:
            mean = load_mean_file(str(path))
        except ValueError as exc:
            assert str(exc)
        else:
            assert mean.dtype == np.float32 and mean.size > 0
            assert mean.size == blob_values(path.read_bytes())[0].size
    count("caffe mean.binaryproto bytes")
