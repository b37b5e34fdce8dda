"""Fuzzing job.conf text through `singa train --dry-run`, in-process (issue 11 point 6).

Every example conf, mutated byte by byte and by structure, is run through the CLI's own
entry point (``singa_core.commands.cli.app``; no subprocess). Every outcome must be exit 0 or a
SingaError with a location (exit 2, ``WHERE: error: ...``, no traceback), within 5 s of CPU time.

The cases run in a folder laid out like the repository (``examples/mnist/train_data.bin``
...), with the real converted stores, so mutated confs reach net building and data reading,
not just the parser. Memory is capped (SINGA_MEMORY_AVAILABLE) so that a mutated batchsize
is refused by the estimate rather than allocated.
"""

from __future__ import annotations

import os

import pytest
from fuzzing import (
    Hang,
    assert_run_or_located_error,
    byte_mutation,
    count,
    example_confs,
    fuzz_settings,
    structure_mutation,
    time_limit,
    write_counts,
)
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.datasets import prepare_dataset
from singa_core.plugin_host.host import get_host

CONFS = example_confs()
runner = CliRunner()


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory, mnist_stores, data_dir):
    """A folder with the examples' data files where the confs expect them."""
    root = tmp_path_factory.mktemp("fuzzroot")
    ex = root / "examples"
    for name in ("mnist", "cifar10", "char-rnn", "rbm", "frameworks"):
        (ex / name).mkdir(parents=True)
    for f in ("train_data.bin", "test_data.bin"):
        os.symlink(mnist_stores / f, ex / "mnist" / f)
    host = get_host()
    prepare_dataset(host.get("dataset", "cifar10")(), ex / "cifar10", data_dir / "cifar10")
    prepare_dataset(
        host.get("dataset", "tinyshakespeare")(), ex / "char-rnn", data_dir / "tinyshakespeare"
    )
    yield root
    write_counts()


@pytest.fixture
def in_root(fuzz_root, monkeypatch):
    monkeypatch.chdir(fuzz_root)
    monkeypatch.setenv("SINGA_MEMORY_AVAILABLE", "512M")
    return fuzz_root


def _dry_run(root, data: bytes, target: str) -> None:
    conf = root / "job.conf"
    conf.write_bytes(data)
    try:
        with time_limit():
            res = runner.invoke(app, ["train", "job.conf", "--dry-run"])
    except Hang as exc:  # raised outside the CLI's own handling
        raise AssertionError(f"hang: {exc}") from None
    if isinstance(res.exception, Hang):
        raise AssertionError(f"hang: {res.exception}")
    assert_run_or_located_error(res)
    count(target)


@pytest.mark.slow
def test_every_example_conf_passes_unmutated(in_root):
    """The baseline the mutations start from (the rbm stages need earlier stages' files)."""
    for conf in CONFS:
        _dry_run(in_root, conf.read_bytes(), "job.conf unmutated")


@fuzz_settings(30)
@given(data=st.data())
def test_byte_mutations_of_example_confs(in_root, data):
    conf = data.draw(st.sampled_from(CONFS), label="conf")
    mutated = data.draw(byte_mutation(conf.read_bytes()), label="bytes")
    _dry_run(in_root, mutated, "job.conf bytes")


@pytest.mark.slow
@fuzz_settings(45)
@given(data=st.data())
def test_structure_mutations_of_example_confs(in_root, data):
    conf = data.draw(st.sampled_from(CONFS), label="conf")
    text = data.draw(structure_mutation(conf.read_text()), label="text")
    _dry_run(in_root, text.encode("utf-8", "surrogatepass"), "job.conf structure")
