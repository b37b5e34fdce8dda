"""kvfile read throughput with and without singa's per-record checksums (issue 30).

    python benchmarks/store_checksum.py [--rounds 5] [--steps 1] [--records 20000]

Writes the same records twice into a temp folder, MNIST-sized (a RecordProto of 784 pixel
bytes, key ``%08d``) by default: once as 0.3's plain tuples (``SINGA_KVFILE_CHECKSUMS=0``)
and once checksummed (a CRC-32 per tuple, checked on every read). Each round reads every
record of each file through the kvfile store (open, ``read()`` until the end, close), the
two alternating so a shared machine's drift hits both alike; the files are read once before
timing so both come from the page cache. Prints the machine facts, MB/s and records/s of
each, and the checksums' cost per record.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleaved, load_average, standard_args  # noqa: E402


def write(path: Path, n: int, size: int, checksums: bool) -> int:
    from singa_builtins.stores.kvfile import KVFileStore

    from singa_core.schema import common_pb2
    from singa_core.store import KCREATE

    store = KVFileStore()
    store.checksums = checksums
    store.open(str(path), KCREATE)
    pixels = bytes(range(256)) * (size // 256 + 1)
    for i in range(n):
        rec = common_pb2.RecordProto(shape=[size], label=i % 10, pixel=pixels[i % 256 :][:size])
        store.write(b"%08d" % i, rec.SerializeToString())
    store.close()
    return path.stat().st_size


def read_all(path: Path) -> int:
    from singa_builtins.stores.kvfile import KVFileStore

    from singa_core.store import KREAD

    store = KVFileStore()
    store.open(str(path), KREAD)
    n = 0
    while store.read() is not None:
        n += 1
    store.close()
    return n


def main() -> None:
    args = standard_args(
        __doc__.splitlines()[0],
        rounds=5,
        steps=1,
        warmup=1,
        extra=lambda ap: (
            ap.add_argument("--records", type=int, default=20000),
            ap.add_argument("--record-bytes", type=int, default=784),
        ),
    )
    print(f"at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="singa-bench-crc-") as tmp:
        files = {}
        for name, crc in (("plain (0.3 tuples)", False), ("checksummed", True)):
            path = Path(tmp) / f"{'crc' if crc else 'plain'}.bin"
            files[name] = (path, write(path, args.records, args.record_bytes, crc))
        fns = {name: (lambda _i, p=path: read_all(p)) for name, (path, _) in files.items()}
        times = interleaved(fns, args.rounds, args.steps, args.warmup)
    print(
        f"{args.records} records of {args.record_bytes} pixel bytes; {args.rounds} rounds, "
        f"median of each"
    )
    medians = {}
    for name, (_, size) in files.items():
        t = statistics.median(times[name])
        medians[name] = t
        print(
            f"  {name:<20} {size / 1e6:7.1f} MB  {size / t / 1e6:8.1f} MB/s  "
            f"{args.records / t:10.0f} records/s  ({t * 1000:.1f} ms a pass)"
        )
    plain, crc = medians["plain (0.3 tuples)"], medians["checksummed"]
    print(
        f"checksums cost {(crc - plain) / args.records * 1e6:.2f} us a record "
        f"({(crc / plain - 1) * 100:+.1f}% read time)"
    )
    print(f"at end: {load_average()}; pid {os.getpid()}")


if __name__ == "__main__":
    main()
