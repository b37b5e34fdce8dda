"""`singa plot`: a PNG of real runs' curves (checked pixel by pixel for the line colours),
the same in the terminal without matplotlib, and located errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.plotting import read_curves

runner = CliRunner()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two short real runs of the small MLP (different learning rates)."""
    from conftest import mlp_conf, write_csv_blobs

    root = tmp_path_factory.mktemp("plot")
    data = write_csv_blobs(root / "blobs.csv")
    out = []
    for name, lr in (("fast", "0.05"), ("slow", "0.005")):
        ws = root / name
        conf = root / f"{name}.conf"
        conf.write_text(mlp_conf(data, ws))
        res = runner.invoke(
            app,
            [
                "train",
                str(conf),
                "--seed",
                "1",
                "-q",
                "--no-tensorboard",
                "-o",
                f"updater.learning_rate.base_lr={lr}",
            ],
        )
        assert res.exit_code == 0, res.output
        out.append(ws)
    return out


def colour_pixels(img: np.ndarray, hex_colour: str) -> int:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return int((np.abs(img[..., :3] - rgb).max(axis=-1) < 0.08).sum())


def test_png_of_two_runs(two_runs, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    out = tmp_path / "curves.png"
    res = runner.invoke(app, ["plot", *map(str, two_runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.output
    img = matplotlib.image.imread(out)
    assert img.shape[:2] == (450, 1200)  # two panels (loss, accuracy), 6x4.5 in each at 100 dpi
    half = img.shape[1] // 2
    for panel in (img[:, :half], img[:, half:]):
        # matplotlib's first two colours: one per workspace, drawn in both panels
        assert colour_pixels(panel, "#1f77b4") > 300
        assert colour_pixels(panel, "#ff7f0e") > 300
    # the default target: FIRST_WORKSPACE/plot.png
    res = runner.invoke(app, ["plot", str(two_runs[0])])
    assert res.exit_code == 0, res.output
    assert (two_runs[0] / "plot.png").stat().st_size > 10_000


def test_curves_follow_metrics_jsonl(two_runs):
    curves = read_curves(two_runs[0])
    assert [s for s, _ in curves.series[("train", "loss")]] == [0, 10, 20, 30, 40, 50]
    assert [s for s, _ in curves.series[("test", "accuracy")]] == [0, 30, 60]  # 60: the end
    assert curves.series[("train", "loss")][-1][1] < curves.series[("train", "loss")][0][1]


def test_terminal_needs_no_matplotlib(two_runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = runner.invoke(app, ["plot", *map(str, two_runs), "--terminal"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.startswith("loss\n") and "\naccuracy\n" in out
    assert "fast train" in out and "slow test" in out and "(step)" in out
    rows = out.split("\naccuracy\n")[0].splitlines()[1:17]
    assert len(rows) == 16 and all("|" in r for r in rows)
    assert any("*" in r for r in rows) and any("o" in r for r in rows)
    # without matplotlib a PNG is a clear error naming the extra
    res = runner.invoke(app, ["plot", str(two_runs[0])])
    assert res.exit_code == 2
    assert "help: pip install 'singa-classic[plot]'" in res.output


def test_errors_are_located(tmp_path, two_runs):
    res = runner.invoke(app, ["plot", str(tmp_path / "nothing"), "--terminal"])
    assert res.exit_code == 2
    assert f"{tmp_path / 'nothing' / 'metrics.jsonl'}: error: no metrics.jsonl here" in res.output
    bad = tmp_path / "bad"
    bad.mkdir()
    lines = (two_runs[0] / "metrics.jsonl").read_text().splitlines()
    (bad / "metrics.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    res = runner.invoke(app, ["plot", str(bad), "--terminal"])
    assert res.exit_code == 2
    assert f"{bad / 'metrics.jsonl'}:2: error: not a JSON record" in res.output
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "metrics.jsonl").write_text(lines[0] + "\n")  # started, nothing displayed yet
    res = runner.invoke(app, ["plot", str(fresh), "--terminal"])
    assert res.exit_code == 2
    assert f"{fresh / 'metrics.jsonl'}: error: the runs have no metrics to plot yet" in res.output
    res = runner.invoke(app, ["plot", str(two_runs[0]), "--terminal", "--metric", "perplexity"])
    assert res.exit_code == 2 and "the runs have: loss, accuracy, lr" in res.output
