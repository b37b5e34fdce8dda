"""The docs and the help say the same about what `singa predict` reads (issue 38 point 9):
`singa predict --help` said "No training data is read" while docs/guide/predict.md said the
first 256 training records are read. The code reads them (inference/input_range.py, PEEK,
for the range of values the model was trained on); the help, the Python API's docstring and
predict.md say so, and this test checks both what they say and what the code does."""

from __future__ import annotations

from pathlib import Path

from singa_core.inference.input_range import PEEK

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "core" / "help_snapshots"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_help_api_and_guide_name_the_records_predict_reads():
    said = f"first {PEEK} records"
    assert said in _flat((SNAPSHOTS / "predict.txt").read_text())
    assert f"first {PEEK} records of the training store are read" in _flat(
        (REPO / "docs" / "guide" / "predict.md").read_text()
    )
    from singa_core.api.job import Job

    assert said in _flat(Job.model.__doc__)


def test_nothing_says_no_training_data_is_read():
    pages = [
        *SNAPSHOTS.glob("*.txt"),
        *REPO.glob("docs/**/*.md"),
        REPO / "README.md",
        REPO / "singa_core" / "commands" / "cli.py",
        REPO / "singa_core" / "api" / "job.py",
    ]
    wrong = [p.name for p in pages if "no training data is read" in _flat(p.read_text()).lower()]
    assert wrong == []


def test_predict_reads_the_first_records_only(tmp_path):
    """A value beyond record PEEK does not reach the model's trained range; one before it
    does."""
    import numpy as np
    from conftest import mlp_conf

    from singa_core.api.job import Job

    rng = np.random.default_rng(0)
    rows = rng.normal(0, 1, size=(PEEK + 50, 4)).round(3)
    rows[PEEK + 10, 0] = 1000.0  # past what predict reads
    rows[PEEK - 1, 1] = -50.0  # the last record it reads
    data = tmp_path / "b.csv"
    data.write_text("".join(f"{i % 3}," + ",".join(map(str, r)) + "\n" for i, r in enumerate(rows)))
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws", steps=2))
    job = Job.from_file(conf, quiet=True, tensorboard=False)
    job.train()
    seen = job.model().trained_range
    assert seen is not None
    assert seen.low == -50.0
    assert seen.high < 1000.0
