"""The cluster's job registry: the GCS's key-value store (namespace ``singa-jobs``), read
and written through Ray's ``GcsClient`` with this machine's token, without ``ray.init``.

A ``GcsClient`` needs no Ray node on the machine it runs on (measured: 1.0 s from a machine
that holds the token but is not a node, where ``ray.init`` waited 62 s and failed), so
``singa jobs|logs|stop --address`` work from any machine that holds the token, and a job's
runner on the head keeps writing its record when its supervisor actor is gone.

Keys:

* ``job:<id>``: the job's record (JSON): id, name, submitter, node, state, step of total,
  the latest metrics, workspace, submitted time, exit status, ``log_size`` (bytes of its log
  in the registry) and ``log_start`` (the first of them kept);
* ``log:<id>:<k>``: bytes ``k*CHUNK`` to ``(k+1)*CHUNK`` of the job's log (the last chunk
  is rewritten as it grows; at most :data:`KEEP` bytes are kept, older chunks removed);
* ``stop:<id>``: a stop asked for (``{"now": bool, "time": t, "by": "user@host"}``); the
  first one is created only if absent (so two ``singa stop`` at once signal once); ``--now``
  overwrites it.
"""

from __future__ import annotations

import json

NAMESPACE = "singa-jobs"
JOB = "job:"
LOG = "log:"
STOP = "stop:"
CHUNK = 64 * 1024
KEEP = 4 * 1024 * 1024  # bytes of a job's log kept in the registry (the newest)
TIMEOUT = 10.0  # seconds for one call to the GCS


def log_key(job_id: str, k: int) -> str:
    return f"{LOG}{job_id}:{k:08d}"


class Registry:
    """The registry of the cluster whose GCS is at ``gcs_address`` (HOST:PORT)."""

    def __init__(self, gcs_address: str, timeout: float | None = None) -> None:
        from ray._raylet import GcsClient
        from singa_builtins.engines.ray.machine import scaled

        self.address = gcs_address
        self.timeout = scaled(TIMEOUT, cap=60.0) if timeout is None else timeout
        self.client = GcsClient(address=gcs_address)

    # -- raw ---------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self.client.internal_kv_get(key.encode(), namespace=NAMESPACE.encode(),
                                           timeout=self.timeout)  # fmt: skip

    def put(self, key: str, value: bytes | str, overwrite: bool = True) -> bool:
        """Store ``value``; False when ``overwrite`` is off and the key was there."""
        data = value.encode() if isinstance(value, str) else value
        added = self.client.internal_kv_put(
            key.encode(), data, overwrite, namespace=NAMESPACE.encode(), timeout=self.timeout
        )
        return bool(added)  # fmt: skip

    def keys(self, prefix: str) -> list[str]:
        raw = self.client.internal_kv_keys(prefix.encode(), namespace=NAMESPACE.encode(),
                                           timeout=self.timeout)  # fmt: skip
        return sorted(k.decode(errors="replace") for k in raw)

    def delete(self, key: str, by_prefix: bool = False) -> int:
        return self.client.internal_kv_del(key.encode(), by_prefix, namespace=NAMESPACE.encode(),
                                           timeout=self.timeout)  # fmt: skip

    # -- records -----------------------------------------------------------------------------
    def put_record(self, rec: dict) -> None:
        self.put(JOB + rec["id"], json.dumps(rec))

    def record(self, job_id: str) -> dict | None:
        raw = self.get(JOB + job_id)
        if raw is None:
            return None
        try:
            rec = json.loads(raw)
        except ValueError:
            return {"id": job_id, "state": "damaged", "message": "its registry entry is not JSON"}
        if not isinstance(rec, dict):
            return {"id": job_id, "state": "damaged",
                    "message": "its registry entry is no record"}  # fmt: skip
        return rec

    def job_ids(self) -> list[str]:
        return sorted(k[len(JOB) :] for k in self.keys(JOB))

    def forget(self, job_id: str) -> None:
        for prefix in (JOB + job_id, STOP + job_id, f"{LOG}{job_id}:"):
            self.delete(prefix, by_prefix=prefix.endswith(":"))

    # -- stops -------------------------------------------------------------------------------
    def ask_stop(self, job_id: str, now: bool, by: str, when: float) -> bool:
        """Record a stop; False when one (not ``--now``) was already asked and ``now`` is
        not given (nothing more to do)."""
        data = json.dumps({"now": now, "time": when, "by": by})
        if self.put(STOP + job_id, data, overwrite=False):
            return True
        if not now:
            return False
        self.put(STOP + job_id, data, overwrite=True)
        return True

    def stop_asked(self, job_id: str) -> dict | None:
        raw = self.get(STOP + job_id)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return {"now": False}
        return data if isinstance(data, dict) else {"now": False}

    # -- logs --------------------------------------------------------------------------------
    def log_since(self, rec: dict, offset: int) -> tuple[bytes, int, int]:
        """(the bytes of the job's log from ``offset`` that the registry holds, the next
        offset, the bytes skipped because they are no longer kept)."""
        size, start = int(rec.get("log_size") or 0), int(rec.get("log_start") or 0)
        skipped = max(0, start - offset)
        offset = max(offset, start)
        out = bytearray()
        k = offset // CHUNK
        while offset + len(out) < size:
            raw = self.get(log_key(rec["id"], k)) or b""
            lo = max(0, offset + len(out) - k * CHUNK)
            piece = raw[lo : size - k * CHUNK]
            if not piece:
                break  # not there (yet): the next call reads it
            out += piece
            k += 1
        return bytes(out), offset + len(out), skipped


class LogShipper:
    """Copies a growing log file into the registry, chunk by chunk (see the module)."""

    def __init__(self, registry: Registry, job_id: str, path) -> None:
        self.registry = registry
        self.job_id = job_id
        self.path = path
        self.size = 0  # bytes shipped
        self.start = 0  # first byte kept

    def ship(self) -> bool:
        """Ship what was written since the last call; False when the GCS did not take it
        (the next call tries again)."""
        try:
            with open(self.path, "rb") as fh:
                first = (self.size // CHUNK) * CHUNK
                fh.seek(first)
                data = fh.read()
        except OSError:
            return True
        try:
            for at in range(0, len(data), CHUNK):
                piece = data[at : at + CHUNK]
                if first + at + len(piece) <= self.size:
                    continue  # a whole chunk shipped before
                self.registry.put(log_key(self.job_id, (first + at) // CHUNK), piece)
            size = first + len(data)
            start = max(0, (size - KEEP) // CHUNK * CHUNK)
            for k in range(self.start // CHUNK, start // CHUNK):
                self.registry.delete(log_key(self.job_id, k))
        except Exception:  # noqa: BLE001 - the GCS is gone for a moment: ship it later
            return False
        self.size, self.start = size, start
        return True
