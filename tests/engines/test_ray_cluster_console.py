"""Jobs on the cluster, seen and stopped from any machine with the token (issue 37 points
1, 2 and 7), on three emulated machines (tests/engines/emulated_machines.py) set up by the
README's "Two or more machines" block: machine 0 is the head, machine 1 joins with the
token and submits, machine 2 has no token at first.

In order, one set of machines:

1. machine 1: ``singa submit JOB.conf --engine ray --address HEAD`` prints the job's id
   within seconds (the job runs under a detached supervisor on the head);
2. machine 2, without the token: ``singa jobs --address HEAD`` is refused (exit 2);
3. machine 1 halted (its PID namespace killed: the submitting machine is gone);
4. machine 2 joins with the token: ``singa jobs --address HEAD --json`` lists the job
   running with its submitter, node and progress; ``singa logs ID`` (RAY_ADDRESS, no
   --address) shows its lines; ``singa stop ID`` stops it, ``singa logs ID -f`` follows it
   to its end (the checkpoint line), and the job is listed stopped with exit 143;
5. a second job whose supervisor is killed with -9 is listed failed, naming it, once its
   training has checkpointed its last step and ended.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from tests.conftest import mlp_conf, write_csv_blobs
from tests.engines.emulated_machines import (
    EmulatedCluster,
    join,
    namespace_problem,
    readme_recipe,
    singa_runner,
    start_ray,
)

pytestmark = pytest.mark.slow

HEAD, SUBMITTER, VIEWER = 0, 1, 2


def test_a_job_submitted_to_the_cluster_outlives_its_machine_and_is_stopped_from_another(
    tmp_path,
):
    problem = namespace_problem()
    if problem:
        pytest.skip(problem)
    pytest.importorskip("ray")
    recipe = readme_recipe()
    data = write_csv_blobs(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    ws = tmp_path / "ws"
    conf.write_text(mlp_conf(data, ws, steps=1_000_000))
    with EmulatedCluster(3) as c:
        start_ray(c, recipe, head=HEAD, others=(SUBMITTER,))
        head = f"{c.address(HEAD)}:{recipe.port()}"

        singa = singa_runner(c, recipe, tmp_path, timeout=120)

        # 1. submitted from machine 1
        t0 = time.monotonic()
        res = singa(SUBMITTER, "submit", str(conf), "--engine", "ray", "--address", head,
                    "-o", "disp_freq=200")  # fmt: skip
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r"[0-9a-f]{6}", job), res.stdout
        assert f"singa logs {job} --address {head} -f" in res.stderr
        print(f"submitted in {took:.1f} s")
        assert took < 60

        # 2. a machine without the token sees nothing
        assert not (c.home(VIEWER) / ".ray" / "auth_token").exists()
        res = singa(VIEWER, "jobs", "--address", head, timeout=180)
        assert res.returncode == 2 and "--address: error:" in res.stderr, res.stderr
        assert job not in res.stdout

        # 3. the submitting machine is gone
        c.halt(SUBMITTER)

        # 4. seen, followed and stopped from machine 2 (with the token, a node)
        join(c, recipe, VIEWER)
        deadline = time.monotonic() + 120
        while True:
            res = singa(VIEWER, "jobs", "--address", head, "--json")
            assert res.returncode == 0, res.stderr
            (rec,) = [r for r in json.loads(res.stdout) if r["id"] == job]
            if rec["state"] == "running" and (rec.get("step") or 0) > 0:
                break
            assert rec["state"] in ("running", "starting"), rec
            assert time.monotonic() < deadline, rec
            time.sleep(2)
        assert rec["submitter"].startswith("root@") and rec["address"] == c.address(HEAD)
        assert rec["total"] == 1_000_000 and rec["workspace"] == str(ws)
        table = singa(VIEWER, "jobs", "--address", head).stdout
        assert job in table and "running" in table and c.address(HEAD) in table
        by_env = {"RAY_ADDRESS": head}  # Ray's default address
        res = singa(VIEWER, "logs", job, env=by_env)
        assert res.returncode == 0 and "Train step-" in res.stdout, res.stderr
        res = singa(VIEWER, "stop", job, env=by_env)
        assert res.returncode == 0 and f"stopping (a checkpoint first) job {job}" in res.stderr
        t0 = time.monotonic()
        res = singa(VIEWER, "logs", job, "--address", head, "-f", timeout=180)
        assert res.returncode == 0 and "continue with --resume" in res.stdout, res.stdout[-2000:]
        print(f"logs -f returned {time.monotonic() - t0:.1f} s after the stop")
        res = singa(VIEWER, "jobs", "--address", head, "--json")
        (rec,) = [r for r in json.loads(res.stdout) if r["id"] == job]
        assert rec["state"] == "stopped" and rec["exit_code"] == 143, rec
        assert list((ws / "checkpoint").glob("step*-worker0"))
        res = singa(VIEWER, "stop", job, "--address", head)
        assert res.returncode == 2 and "not running: it stopped" in res.stderr

        # 5. a job whose supervisor died is failed, with the reason (the first job's
        # supervisor process may still be ending: the new one is the one not seen before)
        def supervisors():
            return {pid for pid, cmd in c.processes(HEAD).items()
                    if "JobSupervisor" in " ".join(cmd)}  # fmt: skip

        before = supervisors()
        res = singa(VIEWER, "submit", str(conf), "--engine", "ray", "--address", head,
                    "--workspace", str(tmp_path / "ws2"))  # fmt: skip
        assert res.returncode == 0, res.stderr
        second = res.stdout.strip().splitlines()[-1]
        (sup,) = supervisors() - before
        os.kill(sup, signal.SIGKILL)  # a pid of this test's own machine, as the host sees it
        deadline = time.monotonic() + 120  # the training checkpoints its last step first
        while True:
            res = singa(VIEWER, "jobs", "--address", head, "--json")
            (rec,) = [r for r in json.loads(res.stdout) if r["id"] == second]
            if rec["state"] not in ("running", "starting") or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert rec["state"] == "failed" and "supervisor" in rec["message"], rec
