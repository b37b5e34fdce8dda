"""CLI commands around training: data, test, dry-run of the example, engine choice."""

from __future__ import annotations

import io
import shutil

import pytest
from conftest import REPO
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.plugin_host.host import get_host
from singa_core.running.reporting import Reporter

runner = CliRunner()
MNIST_FILES = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
]


def test_data_mnist_from_folder(data_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("SINGA_DATA", raising=False)
    res = runner.invoke(
        app, ["data", "mnist", "--from", str(data_dir / "mnist"), "--out", str(tmp_path / "out")]
    )
    assert res.exit_code == 0, res.output
    # 60,000 records of 817 bytes, each with its 4-byte CRC-32
    assert (tmp_path / "out" / "train_data.bin").stat().st_size == 49_020_000 + 60_000 * 4


def test_data_mnist_from_env(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SINGA_DATA", str(data_dir))
    res = runner.invoke(app, ["data", "mnist", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "test_data.bin").exists()


@pytest.fixture
def local_urls(data_dir, tmp_path, monkeypatch):
    """Point the converter's download addresses at local copies (no network in tests)."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in MNIST_FILES:
        shutil.copy(data_dir / "mnist" / name, mirror / name)
    conv = get_host().get("dataset", "mnist")
    files = {n: (sha, size, (mirror / n).as_uri()) for n, (sha, size, _u) in conv.files.items()}
    monkeypatch.setattr(conv, "files", files)
    monkeypatch.delenv("SINGA_DATA", raising=False)
    monkeypatch.setenv("SINGA_CACHE", str(tmp_path / "cache"))
    return mirror


def test_data_mnist_downloads_and_checks_sha256(local_urls, tmp_path):
    res = runner.invoke(app, ["data", "mnist", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cache" / "mnist" / "t10k-labels-idx1-ubyte.gz").exists()
    assert (tmp_path / "out" / "train_data.bin").exists()


def test_data_mnist_bad_download_checksum(local_urls, tmp_path):
    (local_urls / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not the file")
    res = runner.invoke(app, ["data", "mnist", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "wrong checksum" in res.output and "help:" in res.output
    assert not (tmp_path / "cache" / "mnist" / "t10k-labels-idx1-ubyte.gz").exists()


def test_data_mnist_says_where_to_put_files(local_urls, tmp_path):
    for name in MNIST_FILES:
        (local_urls / name).unlink()  # the "network" fails
    res = runner.invoke(app, ["data", "mnist", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "cannot find the raw mnist files" in res.output
    assert "--from FOLDER" in res.output and "SINGA_DATA" in res.output
    assert "train-images-idx3-ubyte.gz" in res.output


def test_data_unknown_dataset():
    res = runner.invoke(app, ["data", "mnsit", "--out", "x"])
    assert res.exit_code == 2 and 'did you mean "mnist"' in res.output


def test_dry_run_of_the_mnist_example(mnist_stores):
    res = runner.invoke(
        app,
        [
            "train",
            "--dry-run",
            str(REPO / "examples" / "mnist" / "job.conf"),
            "-o",
            f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
            "-o",
            f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "total: 11,972,510 parameter values in 12 params" in res.output
    assert "fc1    kInnerProduct  <- data" in res.output
    assert "out 64x2500" in res.output and "out 100x2500" in res.output


def test_engine_that_cannot_run_the_cluster(small_job):
    conf, _ = small_job()
    res = runner.invoke(
        app, ["train", str(conf), "--engine", "inprocess", "-o", "cluster.nworker_groups=2"]
    )
    assert res.exit_code == 2
    assert "engine 'inprocess' cannot run this job: it runs 1 worker group" in res.output
    assert "help: choose another --engine" in res.output


def test_no_engine_supports_the_cluster(small_job, monkeypatch):
    from singa_core.commands import cli
    from singa_core.errors import SingaError

    class Nothing:
        priority = 0

        @staticmethod
        def supports(job):
            return "it supports nothing"

    host = cli._host()
    entries = host.registry("engine").entries
    saved = {name: entry.obj for name, entry in entries.items()}
    try:
        for entry in entries.values():
            entry.obj = Nothing
        with pytest.raises(SingaError) as err:
            cli.select_engine(host, None, None)
    finally:
        for name, obj in saved.items():
            entries[name].obj = obj
    assert "no installed engine can run this cluster configuration" in str(err.value)
    assert "it supports nothing" in "\n".join(err.value.notes)


def test_test_command_needs_a_checkpoint(small_job):
    conf, _ = small_job()
    res = runner.invoke(app, ["test", str(conf)])
    assert res.exit_code == 2 and "no checkpoint to test" in res.output


def test_validation_net_fires(small_job):
    conf, ws = small_job(steps=20)
    res = runner.invoke(
        app,
        [
            "train",
            str(conf),
            "-o",
            "validate_steps=2",
            "-o",
            "validate_freq=10",
            "-o",
            "validate_after=5",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "Validation step-5, " in res.output and "Validation step-15, " in res.output
    assert "Validation step-0" not in res.output


def test_live_progress_line():
    err, out = io.StringIO(), io.StringIO()
    rep = Reporter(out=out, err=err, live=True)
    rep.start(0, 10)
    rep.step_done(9, 0.01)
    rep.metrics("Train", 9, {"loss": 1.5, "accuracy": 0.25})
    rep.finish()
    assert "step 10/10" in err.getvalue() and "ms/step" in err.getvalue()
    assert out.getvalue() == "Train step-9, loss = 1.500000, accuracy = 0.250000\n"
    quiet = io.StringIO()
    plain = Reporter(out=io.StringIO(), err=quiet, live=False)
    plain.start(0, 10)
    plain.step_done(9, 0.01)
    assert quiet.getvalue() == ""
