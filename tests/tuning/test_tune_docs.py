"""docs/guide/tuning.md's worked example runs as written (its space file, its command),
on SINGA's MNIST MLP with the converted stores."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO, mnist_example_args, run_singa

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow
PAGE = REPO / "docs" / "guide" / "tuning.md"


def test_the_worked_example_runs(tmp_path, mnist_stores):
    text = PAGE.read_text()
    space = re.search(r"```proto\n(.*?)```", text, re.S).group(1)
    command = next(line for line in text.splitlines() if line.startswith("singa tune examples"))
    (tmp_path / "quick.conf").write_text(space)
    args = command.split()[2:]
    assert args[:2] == ["examples/mnist/job.conf", "quick.conf"]
    study = tmp_path / "runs" / "quick"
    args = [args[0], str(tmp_path / "quick.conf"), "--study", str(study), *args[4:]]
    res = run_singa("tune", *args, *mnist_example_args(mnist_stores))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "study mlp: 4 trials" in res.stderr and "best trials:" in res.stderr
    assert (study / "best.conf").is_file()
    res = run_singa("tune", "--show", str(study))
    assert res.returncode == 0 and "best: trial" in res.stdout, res.stderr
    res = run_singa("plot", str(study), "--terminal")
    assert res.returncode == 0, res.stderr
    assert "accuracy by trial" in res.stdout and "accuracy at each test pass" in res.stdout


def test_the_results_example_from_python_runs(tmp_path, mnist_stores, monkeypatch, capsys):
    """The "Results" section's Python (docs/examples/guide/tune_results.py), from a folder
    laid out as the page assumes: examples/mnist/job.conf (its stores beside it, two test
    batches a pass) and quick.conf, the worked example's space with trials of 6 steps."""
    import runpy
    import shutil

    mnist = tmp_path / "examples" / "mnist"
    mnist.mkdir(parents=True)
    job = (REPO / "examples" / "mnist" / "job.conf").read_text()
    (mnist / "job.conf").write_text(re.sub(r"test_steps: \d+", "test_steps: 2", job))
    for name in ("train_data.bin", "test_data.bin"):
        shutil.copy(mnist_stores / name, mnist / name)
    space = re.search(r"```proto\n(.*?)```", PAGE.read_text(), re.S).group(1)
    (tmp_path / "quick.conf").write_text(space.replace("train_steps: 60", "train_steps: 6"))
    monkeypatch.chdir(tmp_path)
    got = runpy.run_path(str(REPO / "docs" / "examples" / "guide" / "tune_results.py"))
    result = got["result"]
    assert len(result.records) == 4 and result.best is not None
    assert all(r.state == "complete" and r.value is not None for r in result.records)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed[-4:]] == ["0", "1", "2", "3"]
