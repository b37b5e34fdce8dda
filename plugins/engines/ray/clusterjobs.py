"""Jobs that run on the Ray cluster itself: ``singa submit --engine ray --address HEAD``,
``singa jobs/logs/stop --address HEAD`` from any machine that holds the cluster's token.

Ray's own job submission needs its dashboard (an HTTP server, ``ray[default]``); this is
the same design without it. Each job has a **supervisor**: a detached actor
(``lifetime="detached"``, named ``singa-job-<id>`` in the namespace ``singa-jobs``, no CPU)
on the head node. It starts the job's **runner** (:mod:`.jobrunner`) in a session of its
own on the head, which runs ``singa train JOB.conf ARGS --engine ray --address <the GCS>``
(the job's driver) with its output in ``~/.singa/cluster-jobs/<id>/log`` there, copies that
log and the job's progress into the cluster's registry (:mod:`.registry`: the GCS's
key-value store, namespace ``singa-jobs``), passes on the stops asked for there, and records
how the job ended. The supervisor's death (``kill -9``, its worker process dying, the
head's raylet dying) does not take the training with it: the runner stops the training with
a checkpoint of its last step and the job is **failed**, "its supervisor was killed" or "the
head's raylet died", with that step and checkpoint.

The console reads and writes the registry through a ``GcsClient`` with this machine's
token (no ``ray.init``): ``singa jobs|logs [-f]|stop --address`` work from any machine that
holds the token, a Ray node or not, in about a second. ``singa submit`` joins the cluster as
a driver (it creates the supervisor actor), which Ray allows only on a node: elsewhere it
says so in one line. It answers once the supervisor has checked the job's paths on the head
and started the runner; the runner's own start (a Python process on a head that may be
loaded) is watched by the supervisor, which records the job failed ("the job's runner on
the head did not start: ...") when the runner has not recorded the training within
:data:`START_WAIT` s. A cluster that does not answer is a located error, and the jobs this
machine submitted there are listed as **unknown**, naming the address. The job's paths
(job.conf, stores, workspace, the folder it starts in) are the head's.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from singa_builtins.engines.ray.registry import NAMESPACE, Registry

from singa_core.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

LINGER = 5.0  # seconds a supervisor stays after its job ended
START_WAIT = 60.0  # seconds the supervisor waits for its runner to record the training


def actor_name(job_id: str) -> str:
    return f"singa-job-{job_id}"


def _started(pid: int) -> str:
    from singa_builtins.engines.ray.jobrunner import started

    return started(pid)


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
        log_path = folder / "log"
        log_path.touch()
        ctx = ray.get_runtime_context()
        gcs = ctx.gcs_address
        self.registry = Registry(gcs)
        self.rec.update(node=ctx.get_node_id(), address=ray.util.get_node_ip_address(),
                        log=str(log_path))  # fmt: skip
        me, raylet = os.getpid(), os.getppid()  # Ray's worker processes are its raylet's
        spec = {
            "record": self.rec, "train_args": train_args, "gcs": gcs, "log": str(log_path),
            "supervisor": [me, _started(me)], "raylet": [raylet, _started(raylet)],
        }  # fmt: skip
        # the record with the head's node and the log (the submitter's answer), before the
        # runner can write its own
        self.registry.put_record(self.rec)
        spec_path = folder / "runner.json"
        atomic_write_bytes(spec_path, json.dumps(spec).encode(), "job runner spec")
        err = open(folder / "runner.err", "ab")  # noqa: SIM115 - the runner writes it
        self.runner = subprocess.Popen(
            [sys.executable, "-m", "singa_builtins.engines.ray.jobrunner", str(spec_path)],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
            start_new_session=True,  # outside the process group Ray kills with this actor
        )  # fmt: skip
        err.close()
        self.folder = folder
        # the runner's own start (a Python process on a maybe loaded head) is not waited
        # for here but in the watching thread, which records the job failed if it does not
        # start: the submitter has its answer a Python start-up sooner
        threading.Thread(target=self._watch, name="singa-job-runner", daemon=True).start()

    def _runner_started(self) -> tuple[int, str] | None:
        """Wait (at most :data:`START_WAIT` s) until the runner has recorded the training;
        its (pid, start time), or None after recording the job failed."""
        deadline = time.monotonic() + START_WAIT
        while True:
            rec = self.registry.record(self.rec["id"]) or {}
            if rec.get("state") not in ("starting", None):
                break
            failed = self.runner.poll() not in (None, 0)  # it forks, and exits 0 at once
            if failed or time.monotonic() > deadline:
                tail = (self.folder / "runner.err").read_text(errors="replace").strip()
                last = tail.splitlines()[-1] if tail else f"exit status {self.runner.poll()}"
                why = f"the job's runner on the head did not start: {last}"
                self.rec.update(state="failed", ended=time.time(), exit_code=None, message=why)
                self.registry.put_record(self.rec)
                return None
            time.sleep(0.1)
        self.runner.wait()
        pid = int(rec.get("runner_pid") or 0)
        return pid, _started(pid)

    def info(self) -> dict:
        return self.registry.record(self.rec["id"]) or dict(self.rec)

    def _watch(self) -> None:
        from singa_builtins.engines.ray.jobrunner import alive

        runner = self._runner_started()
        if runner is None:
            time.sleep(LINGER)
            os._exit(0)
        while alive(*runner):
            time.sleep(1.0)
        time.sleep(1.0)  # its last record, written just before it ended
        rec = self.registry.record(self.rec["id"]) or self.rec
        if rec.get("state") in ("running", "starting"):  # the runner died without its record
            rec.update(state="failed", ended=time.time(), exit_code=None,
                       message="its runner on the head was killed; the training got SIGTERM "
                       "from it and checkpoints its last step")  # fmt: skip
            self.registry.put_record(rec)
        time.sleep(LINGER)
        os._exit(0)


# -- the client ------------------------------------------------------------------------------
def _call_error(address: str, exc: BaseException) -> SingaError:
    from singa_builtins.engines.ray.faults import summary

    return SingaError(
        f"the Ray cluster at {address} did not answer a call to its registry ({summary(exc)})",
        where="--address",
        help="the head's GCS answered a moment ago: try again; `ray status` on the head says "
        "whether it is overloaded",
    )


class RayClusterJobs:
    """The console's view of one Ray cluster's jobs (a context manager)."""

    def __init__(self, address: str | None, insecure: bool = False) -> None:
        text = address or os.environ.get("RAY_ADDRESS") or ""
        if not text or text == "local":
            raise SingaError(
                "no Ray cluster named",
                where="--address",
                help="give the cluster's head, --address HEAD:PORT (or set RAY_ADDRESS)",
            )
        self.address = text
        self.insecure = insecure
        self.runtime = None
        self.registry: Registry | None = None

    def __enter__(self) -> RayClusterJobs:
        from singa_builtins.engines.ray.auth import check_cluster, resolve_address
        from singa_builtins.engines.ray.machine import measure
        from singa_builtins.engines.ray.runtime import import_ray

        measure()  # this machine's slowdown, from this process's start-up (machine.py)
        import_ray()
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        warning = check_cluster(self.address, self.insecure)  # located errors, in seconds
        if warning:
            print(warning, file=sys.stderr, flush=True)
        self.gcs = resolve_address(self.address)
        try:
            self.registry = Registry(self.gcs)
        except Exception as exc:  # noqa: BLE001 - Ray's error classes vary
            raise _call_error(self.address, exc) from None
        return self

    def __exit__(self, *exc) -> None:
        if self.runtime is not None:
            self.runtime.__exit__(*exc)
            self.runtime = None

    def _reg(self, what, *args):
        try:
            return what(*args)
        except SingaError:
            raise
        except Exception as exc:  # noqa: BLE001 - a timeout or a dropped GCS connection
            raise _call_error(self.address, exc) from None

    # -- submitting -------------------------------------------------------------------------
    def submit(self, conf: str, args: list[str], *, name: str, workspace: str, cwd: str) -> dict:
        import ray
        from singa_builtins.engines.ray.runtime import Runtime

        self.runtime = Runtime(self.address, insecure=self.insecure, checked=True)
        self.runtime.__enter__()  # a driver: this machine must be a node
        reg = self.registry
        known = set(self._reg(reg.job_ids))
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
        self._reg(reg.put_record, rec)
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
            return ray.get(sup.info.remote(), timeout=START_WAIT + 30)
        except Exception as exc:  # noqa: BLE001 - the supervisor's own error says why
            from singa_builtins.engines.ray.faults import summary

            try:
                reg.forget(job_id)
            except Exception:  # noqa: BLE001 - the error below is what matters
                pass
            raise SingaError(
                f"the job could not start on the cluster's head: {_cause(exc) or summary(exc)}",
                where=conf,
                help="the job's paths (job.conf, stores, workspace, the folder it starts in) "
                "are the head's: put them at the same paths there",
            ) from None

    # -- the registry -----------------------------------------------------------------------
    def find(self, job_id: str) -> str:
        ids = self._reg(self.registry.job_ids)
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

    def info(self, job_id: str) -> dict:
        return self._reg(self.registry.record, job_id) or {
            "id": job_id, "state": "damaged", "message": "its registry entry is gone"}  # fmt: skip

    def list(self) -> list[dict]:
        recs = [self.info(i) for i in self._reg(self.registry.job_ids)]
        return sorted(recs, key=lambda r: r.get("submitted", 0) if _num(r.get("submitted")) else 0)

    def log(self, job_id: str, offset: int) -> tuple[str, int, bool]:
        """(the job's log from byte ``offset``, the next offset, whether more may come)."""
        rec = self.info(job_id)
        running = rec.get("state") in ("running", "starting")
        if "log_size" not in rec:  # a record of an older singa: its tail, once ended
            data = str(rec.get("log_tail", "")).encode()
            start = int(rec.get("log_tail_offset", 0))
            skip = max(0, offset - start)
            text = data[skip:].decode(errors="replace")
            nxt = max(offset, start + len(data))
        else:
            data, nxt, skipped = self._reg(self.registry.log_since, rec, offset)
            text = data.decode(errors="replace")
            if skipped:
                text = (f"[singa: the first {skipped} bytes of this log are kept only on the "
                        f"head ({rec.get('address', 'the head')}), in {rec.get('log')}]\n"
                        + text)  # fmt: skip
        if offset == 0 and not text and not running:
            raise SingaError(
                f"job {job_id} ({rec.get('state', '?')}) has no log in the cluster's registry",
                where=job_id,
                help=f"its log is on the head ({rec.get('address', '?')}), in "
                f"{rec.get('log') or '~/.singa/cluster-jobs/' + job_id + '/log'}",
            )
        return text, nxt, running

    def stop(self, job_id: str, now: bool) -> tuple[bool, dict]:
        rec = self.info(job_id)
        if rec.get("state") != "running":
            raise SingaError(
                f"job {job_id} is not running: it {rec.get('state')}",
                where=job_id,
                help=f"`singa jobs --address {self.address}` shows each job's state",
            )
        by = f"{getpass.getuser()}@{socket.gethostname()}"
        sent = self._reg(self.registry.ask_stop, job_id, now, by, time.time())
        return sent, rec


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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
