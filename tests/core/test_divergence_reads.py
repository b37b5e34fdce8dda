"""Divergence reads as one located message (issue 46, point 5): no raw numpy
``RuntimeWarning`` (numpy's file and source line), no tensorboardX ``NaN or Inf found in
input tensor.``, no ``accuracy = 1.000000`` beside a NaN loss; the error names the job.conf
line of the first layer that went non-finite."""

from __future__ import annotations

import logging
import re
import warnings

from conftest import invoke_singa

from singa_core.running.reporting import format_metrics
from singa_core.testing import blobs_csv, mlp_job


def test_a_diverging_run_says_it_once_at_the_layer(tmp_path, caplog):
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(blobs_csv(tmp_path / "b.csv", n=100), steps=20))
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        res = invoke_singa("train", conf, "--workspace", tmp_path / "ws", "--seed", "1",
                           "-o", "updater.learning_rate.base_lr=1e38",
                           "-o", "disp_freq=1")  # fmt: skip
    assert res.exit_code == 3, res.output
    raw = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert not raw, raw  # numpy's "overflow encountered in add", "invalid value ..."
    assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
    assert "NaN or Inf" not in res.output and "RuntimeWarning" not in res.output
    nan_lines = [ln for ln in res.output.splitlines() if "loss = nan" in ln]
    assert nan_lines and all("accuracy = n/a" in ln for ln in nan_lines), res.output
    (error,) = [ln for ln in res.output.splitlines() if ": error: " in ln]
    assert re.match(
        rf"{re.escape(str(conf))}:\d+:\d+: error: training went non-finite at step", error
    )
    assert "help: " in res.output


def test_the_display_shows_no_metric_beside_a_non_finite_loss():
    nan, inf = float("nan"), float("inf")
    assert format_metrics({"loss": nan, "accuracy": 1.0, "lr": 0.5}) == (
        "loss = nan, accuracy = n/a, lr = 0.500000"
    )
    assert format_metrics({"loss": inf, "accuracy": 0.25}) == "loss = inf, accuracy = n/a"
    assert format_metrics({"loss": 0.5, "accuracy": 1.0}) == "loss = 0.500000, accuracy = 1.000000"
