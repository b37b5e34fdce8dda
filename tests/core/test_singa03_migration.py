"""Coming from SINGA 0.3: its command-line flags, its conf/singa.conf, test without updater."""

from __future__ import annotations

import re

import pytest
from conftest import run_singa
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.legacy import settings_file_error, translate_argv

runner = CliRunner()

# SINGA 0.3's conf/singa.conf, as shipped
SINGA_CONF = """# cluster-wide settings of SINGA 0.3
zookeeper_host: "localhost:2181"
log_dir: "/tmp/singa-log/"
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "-conf", "job.conf"], ["train", "job.conf"]),
        (["train", "-conf=job.conf", "-q"], ["train", "job.conf", "-q"]),
        (["-conf", "job.conf"], ["train", "job.conf"]),
        (["-conf", "job.conf", "-test"], ["test", "job.conf"]),
        (["-conf", "job.conf", "-resume"], ["train", "job.conf", "--resume"]),
        (
            ["train", "-singa_conf", "conf/singa.conf", "-singa_job", "3", "-conf", "j.conf"],
            ["train", "j.conf"],
        ),
        (["train", "job.conf", "--seed", "1"], ["train", "job.conf", "--seed", "1"]),  # as is
    ],
)
def test_translate_argv(argv, expected):
    args, notes = translate_argv(argv)
    assert args == expected
    assert all(n.startswith("note: ") for n in notes)
    assert bool(notes) == (argv != expected)


def test_translate_argv_notes_say_what_changed():
    _, notes = translate_argv(["train", "-singa_conf", "conf/singa.conf", "-conf", "j.conf"])
    assert notes == [
        "note: ignoring `-singa_conf conf/singa.conf`: SINGA 0.3's cluster-wide settings file "
        "(ZooKeeper address, log folder); singa needs none",
        "note: `-conf j.conf` is SINGA 0.3's flag; singa takes the job.conf as an argument: "
        "`singa train j.conf`",
    ]


def test_singa_train_takes_03_flags(small_job, tmp_path):
    conf, ws = small_job(steps=20)
    settings = tmp_path / "singa.conf"
    settings.write_text(SINGA_CONF)
    res = run_singa("train", "-conf", str(conf), "-singa_conf", str(settings), "-q")
    assert res.returncode == 0, res.stderr
    assert f"`-conf {conf}` is SINGA 0.3's flag" in res.stderr
    assert "ignoring `-singa_conf" in res.stderr
    assert (ws / "checkpoint" / "step20-worker0").exists()
    # 0.3's -test mode: singa test
    res = run_singa("-conf", str(conf), "-test")
    assert res.returncode == 0, res.stderr
    assert re.search(r"^Test \(5 batches, .*step20-worker0\): loss = ", res.stdout, re.M)


def test_settings_file_as_the_job_is_explained(tmp_path):
    settings = tmp_path / "singa.conf"
    settings.write_text(SINGA_CONF)
    for command in ("train", "test"):
        res = runner.invoke(app, [command, str(settings)])
        assert res.exit_code == 2
        assert res.output.startswith(
            f"{settings}:2:1: error: this is SINGA 0.3's cluster-wide settings file "
            "(conf/singa.conf: zookeeper_host, log_dir), not a job configuration"
        )
        assert "unknown field" not in res.output and "Traceback" not in res.output
        assert "help: give the job's configuration instead" in res.output


def test_a_job_with_another_unknown_field_is_not_taken_for_the_settings_file():
    assert settings_file_error('zookeeper_host: "h:1"\ntrain_steps: 3\n', "x.conf") is None
    assert settings_file_error("", "x.conf") is None
    err = settings_file_error('log_dir: "/tmp" # logs\n', "x.conf")
    assert str(err.where) == "x.conf:1:1"


def test_singa_test_without_an_updater(small_job, tmp_path):
    """0.3's test mode needed no updater (char-rnn's sample.conf has none)."""
    conf, ws = small_job(steps=20)
    assert runner.invoke(app, ["train", str(conf), "-q", "--seed", "1"]).exit_code == 0
    text = conf.read_text()
    start = text.index("updater {")
    end = text.index("neuralnet {")
    sample = tmp_path / "sample.conf"
    sample.write_text(text[:start] + text[end:])
    res = runner.invoke(app, ["test", str(sample), "--steps", "3"])
    assert res.exit_code == 0, res.output
    assert "Test (3 batches, " in res.output and "accuracy = " in res.output
    # training it still needs one
    res = runner.invoke(app, ["train", str(sample)])
    assert res.exit_code == 2 and "job.conf has no updater" in res.output
