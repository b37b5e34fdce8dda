"""Jobs that run on the Ray cluster itself: ``singa submit --engine ray --address HEAD``,
``singa jobs/logs/stop --address HEAD`` from any machine that has the cluster's token.

Ray's own job submission needs its dashboard (an HTTP server, ``ray[default]``); this is
the same design without it. Each job has a **supervisor**: a detached actor
(``lifetime="detached"``, named ``singa-job-<id>`` in the namespace ``singa-jobs``, no CPU)
on the head node. It starts ``singa train JOB.conf ARGS --engine ray --address <the GCS>``
as a subprocess there (the job's driver; killed with SIGTERM, so it checkpoints, if the
supervisor dies: ``PR_SET_PDEATHSIG``), writes its output to ``~/.singa/cluster-jobs/<id>/log``
on the head, serves ``log``/``stop``/``info`` calls, and keeps the job's record in the
GCS's key-value store (``job:<id>`` in the namespace ``singa-jobs``): id, name, submitter,
node, state, step of total, the latest metrics, workspace, submitted time, exit status,
and once the job has ended the last 256 kB of its log. Then the supervisor leaves (a few
seconds later, for followers to read the end).

So a job outlives the machine that submitted it, and the registry is the cluster's: every
machine that joins the cluster (with its token: token authentication covers the GCS, the
key-value store and the actors alike) sees every job. A job whose supervisor or node died
is **failed** with the reason; a cluster that does not answer is a located error, and the
jobs this machine submitted there are listed as **unknown**, naming the address. The job's
paths (job.conf, stores, workspace, the folder it starts in) are the head's.
"""

from __future__ import annotations

import ctypes
import getpass
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from singa_core.errors import SingaError

NAMESPACE = "singa-jobs"
KEY = "job:"
TAIL = 256 * 1024  # bytes of a finished job's log kept in the registry
PROGRESS_EVERY = 2.0  # seconds between the supervisor's progress updates
LINGER = 5.0  # seconds a supervisor serves its log after the job ended
CALL_TIMEOUT = 20.0


def _kv():
    import ray.experimental.internal_kv as kv

    return kv


def put_record(rec: dict) -> None:
    _kv()._internal_kv_put(KEY + rec["id"], json.dumps(rec), namespace=NAMESPACE)


def get_record(job_id: str) -> dict | None:
    raw = _kv()._internal_kv_get(KEY + job_id, namespace=NAMESPACE)
    if raw is None:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return {"id": job_id, "state": "damaged", "message": "its registry entry is not JSON"}
    if not isinstance(rec, dict):
        return {"id": job_id, "state": "damaged", "message": "its registry entry is no record"}
    return rec


def job_ids() -> list[str]:
    keys = _kv()._internal_kv_list(KEY, namespace=NAMESPACE)
    return sorted(k.decode()[len(KEY) :] for k in keys)


def actor_name(job_id: str) -> str:
    return f"singa-job-{job_id}"


def _die_with(parent: int):
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class JobSupervisor:
    """The detached actor of one job (see the module's text)."""

    def __init__(self, record: dict, train_args: list[str]) -> None:
        import ray

        self.rec = dict(record)
        cwd = self.rec["cwd"]
        if not os.path.isdir(cwd):
            raise ValueError(f"the folder {cwd} the job starts in does not exist on the head")
        conf = os.path.join(cwd, self.rec["conf"])
        if not os.path.isfile(conf):
            raise ValueError(f"the job.conf {conf} does not exist on the head")
        folder = Path.home() / ".singa" / "cluster-jobs" / self.rec["id"]
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "log"
        self.lock = threading.Lock()
        self.stop_asked: dict | None = None
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SINGA_JOB_ID": self.rec["id"]}
        env.pop("RAY_ADDRESS", None)  # the job names its cluster itself (--address)
        log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - the child writes it
        self.child = subprocess.Popen(
            [sys.executable, "-m", "singa_core.commands.cli", "train", *train_args],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 - before any thread here
        )  # fmt: skip
        ctx = ray.get_runtime_context()
        self.rec.update(
            state="running", node=ctx.get_node_id(), address=ray.util.get_node_ip_address(),
            pid=self.child.pid, log=str(self.log_path), started=time.time(),
        )  # fmt: skip
        put_record(self.rec)
        self.ended = threading.Event()  # set once the ended job's record is in the registry
        threading.Thread(target=self._watch, name="singa-job-watch", daemon=True).start()

    # -- the calls ----------------------------------------------------------------------
    def info(self) -> dict:
        with self.lock:
            self._progress()
            return dict(self.rec)

    def log(self, offset: int, limit: int = 1 << 20) -> tuple[str, int, bool]:
        """(the log's text from byte ``offset``, the next offset, whether the job runs).
        It runs until its end is recorded: a follower that sees it end (and stops) finds
        it ended in the registry, not running still, and the log it reads after is whole."""
        running = not self.ended.is_set()
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(limit)
        except OSError:
            data = b""
        return data.decode(errors="replace"), offset + len(data), running or bool(data)

    def stop(self, now: bool) -> bool:
        """SIGTERM to the job (it checkpoints and exits 143) unless a stop is under way;
        ``now``: SIGKILL. False when nothing was sent."""
        with self.lock:
            if self.child.poll() is not None:
                return False
            if not now and self.stop_asked is not None:
                return False
            self.stop_asked = {"time": time.time(), "now": now}
            self.rec["stopping"] = True
            self.rec["stop_now"] = now or self.rec.get("stop_now", False)
            put_record(self.rec)
            try:
                self.child.send_signal(signal.SIGKILL if now else signal.SIGTERM)
            except ProcessLookupError:
                return False
            return True

    # -- its own thread -------------------------------------------------------------------
    def _progress(self) -> None:
        from singa_core.api.jobs import _from_log, _progress

        step, total, metrics = _progress(Path(self.rec["cwd"]) / self.rec["workspace"],
                                         self.rec["id"])  # fmt: skip
        last, engine = _from_log(self.log_path)
        self.rec.update(step=step, total=total, metrics=metrics, engine=engine)
        if last is not None and self.child.poll() is not None:
            self.rec["step"] = last

    def _watch(self) -> None:
        from singa_core.api.jobs import _last_error

        while True:
            try:
                code = self.child.wait(timeout=PROGRESS_EVERY)
                break
            except subprocess.TimeoutExpired:
                with self.lock:
                    self._progress()
                    put_record(self.rec)
        with self.lock:
            self._progress()
            self.rec["exit_code"] = code if code >= 0 else None
            self.rec["ended"] = time.time()
            if code == 0:
                self.rec["state"] = "finished"
            elif self.stop_asked is not None:
                self.rec["state"] = "stopped"
                now = self.rec.get("stop_now")
                self.rec["message"] = "stopped by `singa stop`" + (" --now" if now else "")
            else:
                self.rec["state"] = "failed"
                self.rec["message"] = (
                    f"killed by signal {-code}" if code < 0 else _last_error(self.log_path)
                )
            try:
                with open(self.log_path, "rb") as fh:
                    size = fh.seek(0, 2)
                    fh.seek(max(0, size - TAIL))
                    self.rec["log_tail"] = fh.read().decode(errors="replace")
                    self.rec["log_tail_offset"] = max(0, size - TAIL)
            except OSError:
                pass
            put_record(self.rec)
        self.ended.set()
        time.sleep(LINGER)  # followers read the end, then the registry has it
        os._exit(0)


# -- the client ------------------------------------------------------------------------------
def _refused(what: str, address: str, help_text: str) -> SingaError:
    return SingaError(what, where="--address", help=help_text)


class RayClusterJobs:
    """The console's view of one Ray cluster (a context manager: joins it, then leaves)."""

    def __init__(self, address: str | None, insecure: bool = False) -> None:
        from singa_builtins.engines.ray.runtime import Runtime

        text = address or os.environ.get("RAY_ADDRESS") or ""
        if not text or text == "local":
            raise SingaError(
                "no Ray cluster named",
                where="--address",
                help="give the cluster's head, --address HEAD:PORT (or set RAY_ADDRESS)",
            )
        self.address = text
        self.runtime = Runtime(text, insecure=insecure)

    def __enter__(self) -> RayClusterJobs:
        self.runtime.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.runtime.__exit__(*exc)

    # -- submitting -------------------------------------------------------------------------
    def submit(self, conf: str, args: list[str], *, name: str, workspace: str, cwd: str) -> dict:
        import ray

        known = set(job_ids())
        job_id = secrets.token_hex(3)
        while job_id in known:
            job_id = secrets.token_hex(3)
        gcs = ray.get_runtime_context().gcs_address
        rec = {
            "id": job_id, "name": name, "conf": conf, "args": list(args), "engine": "ray",
            "submitter": f"{getpass.getuser()}@{socket.gethostname()}",
            "workspace": workspace, "cwd": cwd, "submitted": time.time(), "state": "starting",
            "cluster": self.address, "step": None, "total": None, "metrics": {},
        }  # fmt: skip
        put_record(rec)
        train_args = [conf, *_without_address(args), "--address", gcs]
        sup = (
            ray.remote(JobSupervisor)
            .options(
                name=actor_name(job_id), namespace=NAMESPACE, lifetime="detached",
                num_cpus=0, max_restarts=0, max_concurrency=4,
                resources={"node:__internal_head__": 0.001},
            )
            .remote(rec, train_args)
        )  # fmt: skip
        try:
            return ray.get(sup.info.remote(), timeout=60)
        except Exception as exc:  # noqa: BLE001 - the supervisor's own error says why
            from singa_builtins.engines.ray.faults import summary

            _kv()._internal_kv_del(KEY + job_id, namespace=NAMESPACE)
            raise SingaError(
                f"the job could not start on the cluster's head: {_cause(exc) or summary(exc)}",
                where=conf,
                help="the job's paths (job.conf, stores, workspace, the folder it starts in) "
                "are the head's: put them at the same paths there",
            ) from None

    # -- the registry -----------------------------------------------------------------------
    def find(self, job_id: str) -> str:
        ids = job_ids()
        if job_id in ids:
            return job_id
        matches = [i for i in ids if job_id and i.startswith(job_id)]
        if len(matches) == 1:
            return matches[0]
        raise SingaError(
            f"no job {job_id!r} on the cluster at {self.address}"
            if not matches
            else f"{job_id!r} names {len(matches)} jobs",
            where=job_id or "ID",
            help=f"give a job id from `singa jobs --address {self.address}` "
            f"(known: {', '.join(ids) or 'none'})",
        )

    def _supervisor(self, job_id: str):
        import ray

        return ray.get_actor(actor_name(job_id), namespace=NAMESPACE)

    def info(self, job_id: str) -> dict:
        """The job's record, its state checked: a running job whose supervisor does not
        answer is failed, with the reason."""
        import ray

        rec = get_record(job_id) or {"id": job_id, "state": "damaged",
                                     "message": "its registry entry is gone"}  # fmt: skip
        if rec.get("state") not in ("running", "starting"):
            return rec
        try:
            return ray.get(self._supervisor(job_id).info.remote(), timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - dead actor, dead node, no such actor
            again = get_record(job_id) or rec
            if again.get("state") not in ("running", "starting"):
                return again  # it ended meanwhile
            rec["state"] = "failed"
            why = _cause(exc) or type(exc).__name__
            rec["message"] = f"its supervisor on the head, or the head's node, died ({why})"
            return rec

    def list(self) -> list[dict]:
        return sorted((self.info(i) for i in job_ids()), key=lambda r: r.get("submitted", 0))

    def log(self, job_id: str, offset: int) -> tuple[str, int, bool]:
        import ray

        rec = get_record(job_id) or {}
        if rec.get("state") in ("running", "starting"):
            try:
                return ray.get(self._supervisor(job_id).log.remote(offset), timeout=CALL_TIMEOUT)
            except Exception:  # noqa: BLE001 - it ended (or died): the registry's copy
                rec = get_record(job_id) or rec
        tail, start = rec.get("log_tail", ""), int(rec.get("log_tail_offset", 0))
        data = tail.encode()
        skip = max(0, offset - start)
        return data[skip:].decode(errors="replace"), max(offset, start + len(data)), False

    def stop(self, job_id: str, now: bool) -> tuple[bool, dict]:
        import ray

        rec = self.info(job_id)
        if rec.get("state") != "running":
            raise SingaError(
                f"job {job_id} is not running: it {rec.get('state')}",
                where=job_id,
                help=f"`singa jobs --address {self.address}` shows each job's state",
            )
        sent = ray.get(self._supervisor(job_id).stop.remote(now), timeout=CALL_TIMEOUT)
        return sent, rec


def _without_address(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--address":
            skip = True
            continue
        if a.startswith("--address="):
            continue
        out.append(a)
    return out


def _cause(exc: BaseException) -> str:
    """The last line of an actor's own error (e.g. the supervisor's ValueError)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    for line in reversed(lines):
        if line.startswith(("ValueError: ", "FileNotFoundError: ", "PermissionError: ")):
            return line.split(": ", 1)[1]
    return ""
