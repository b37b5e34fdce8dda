"""Run by tests/tuning/test_tune_ray.py inside a private network namespace: `singa tune
--engine ray --address HEAD` against a one-node cluster that checks tokens (started here,
stopped by its pid, never `ray stop`), the trials placed by Ray as actors; and a refusal
without the token."""

from __future__ import annotations

import json
import os

import pytest
from tune_jobs import SPACE, mnist_job, space_file

from tests.conftest import run_singa

pytestmark = pytest.mark.skipif(
    os.environ.get("SINGA_RAY_NETNS") != "1",
    reason="run by tests/tuning/test_tune_ray.py in a private network namespace",
)
TOKEN = "0123456789abcdef" * 4


def test_a_study_on_a_token_checking_cluster(tmp_path, mnist_stores):
    from tests.engines.ray_auth_checks import Head

    conf = mnist_job(tmp_path, mnist_stores, steps=30, test_freq=30)
    space = space_file(tmp_path, SPACE.replace("budget { trials: 4 }", "budget { trials: 3 }"))
    study = tmp_path / "study"
    head = Head(6379, token=TOKEN)
    try:
        refused = run_singa("tune", str(conf), str(space), "--study", str(tmp_path / "no"),
                            "--engine", "ray", "--address", head.address,
                            env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "f" * 64})  # fmt: skip
        res = run_singa("tune", str(conf), str(space), "--study", str(study), "--seed", "2",
                        "--engine", "ray", "--address", head.address,
                        env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN})  # fmt: skip
    finally:
        head.stop()
    assert refused.returncode == 2, refused.stderr
    assert "--address: error:" in refused.stderr and "Traceback" not in refused.stderr
    assert res.returncode == 0, res.stderr[-4000:]
    assert "on the Ray cluster at 127.0.0.1:6379" in res.stderr
    show = run_singa("tune", "--show", str(study), "--json")
    assert show.returncode == 0, show.stderr
    trials = json.loads(show.stdout)["trials"]
    assert len(trials) == 3
    assert {t["state"] for t in trials} <= {"complete", "pruned"}, trials
    assert all(t["node"] for t in trials)  # each ran in an actor Ray placed
    assert (study / "best.conf").is_file()
