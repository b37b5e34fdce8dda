"""Mean files carry the kvfile store's per-record checksum too (the converters write them
through the store): the reader of mean files (kRGBImage, store_conf.mean_file) accepts
checksummed and 0.3's plain tuples, and a flipped byte is an error, not a silently wrong
mean."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers._records import load_mean_file

from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2
from singa_core.store import KCREATE


@pytest.mark.parametrize("checksums", [True, False])
def test_mean_file_round_trip(tmp_path, checksums):
    path = tmp_path / "mean.bin"
    store = get_host().get("store", "kvfile")()
    store.checksums = checksums
    store.open(str(path), KCREATE)
    mean = np.arange(12, dtype=np.float32) / 7
    store.write(
        b"mean", common_pb2.RecordProto(shape=[3, 2, 2], data=mean.tolist()).SerializeToString()
    )
    store.close()
    np.testing.assert_array_equal(load_mean_file(str(path)), mean)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # one bit of a stored value
    path.write_bytes(bytes(raw))
    if checksums:
        with pytest.raises(ValueError, match="fails its checksum"):
            load_mean_file(str(path))
    else:  # 0.3's plain tuples carry nothing to check against
        assert not np.array_equal(load_mean_file(str(path)), mean)
