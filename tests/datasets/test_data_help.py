"""`singa data NAME --help` lists the converter's own options (issue 31: `singa data images
--help` listed none of --resize, --gray, --shuffle, --val-fraction, --encoded, --backend,
--seed; they were only in docs/guide/data.md)."""

from __future__ import annotations

import pytest
from conftest import REPO, run_singa

from singa_core.plugin_host.host import get_host


def test_images_help_lists_every_option_with_its_help():
    res = run_singa("data", "images", "--help")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("Usage: singa data images")
    options = ["--out DIR", "--from DIR", "DIR ", "--resize W H", "--gray", "--shuffle"]
    options += ["--val-fraction F", "--encoded", "--backend kvfile|lmdb", "--seed N"]
    for option in options:
        assert option in out, option
    line = next(x for x in out.splitlines() if x.strip().startswith("--gray"))
    assert "grey" in line  # each option has its help on its line
    # the same with DIR and options given before --help
    res = run_singa("data", "images", "photos", "--resize", "8", "8", "--help")
    assert res.returncode == 0 and "--val-fraction F" in res.stdout


@pytest.mark.parametrize("name", sorted(get_host().registry("dataset").names()))
def test_every_converter_help_names_its_options_or_says_it_has_none(name):
    res = run_singa("data", name, "--help")
    assert res.returncode == 0, res.stderr
    conv = get_host().get("dataset", name)()
    own = conv.options_help()
    if own:
        assert own.strip() in res.stdout
    else:
        assert f"singa data {name} takes no other arguments." in res.stdout


def test_data_help_without_a_name_is_the_command_help():
    res = run_singa("data", "--help")
    snapshot = (REPO / "tests" / "core" / "help_snapshots" / "data.txt").read_text()
    assert res.returncode == 0 and res.stdout.strip() == snapshot.strip()
