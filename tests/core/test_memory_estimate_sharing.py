"""The dry-run's memory estimate counts a Param once (issue 31: the MNIST MLP was estimated
at 251 MiB for a run whose peak was 194 MiB, the test net's Params, which share the
training net's values, counted a second time) and a checkpoint write's pieces by the
largest array (not 16 MiB pieces for a net of 2 MB). benchmarks/memory_estimate.py
compares the estimate with the measured peak of the three examples."""

from __future__ import annotations

import re

from conftest import invoke_singa, mlp_conf, write_csv_blobs

from singa_core.memory import format_bytes


def _rows(output: str) -> dict[str, list[str]]:
    table = output.split("memory estimate", 1)[1].split("\n  total ", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells[1:]
    return rows


def test_test_net_params_are_not_counted_again_and_checkpoint_pieces_fit_the_params(tmp_path):
    data = write_csv_blobs(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws", hidden=64))
    res = invoke_singa("train", conf, "--dry-run")
    assert res.exit_code == 0, res.output
    rows = _rows(res.output)
    # kinds: data, grad, params, updater, scratch, total
    w1 = 4 * 64 * 4  # ip1's weight: 64 x 4 float32
    b1 = 64 * 4
    assert rows["kTrain ip1"][2] == format_bytes(2 * (w1 + b1))  # value and gradient
    assert rows["kTest ip1"][2] == "0 B" and rows["kTest ip2"][2] == "0 B"
    largest = w1  # ip1's weight (64x4) and ip2's (3x64) are the largest arrays
    assert max(w1, 3 * 64 * 4) == largest
    assert rows["train (checkpoint write)"][4] == format_bytes(largest + (1 << 20))
    # the params column's total is the training net's Params alone
    params_total = _total_row(res.output)[2]
    assert params_total == format_bytes(2 * (w1 + b1 + 3 * 64 * 4 + 3 * 4))


def _total_row(output: str) -> list[str]:
    line = next(x for x in output.splitlines() if x.strip().startswith("total ") and "B" in x)
    return re.split(r"\s{2,}", line.strip())[1:]
