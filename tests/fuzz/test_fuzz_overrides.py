"""Fuzzing ``-o FIELD=VALUE`` override strings (issue 11 point 6): real field paths of the
schema (with good and bad indices) set to extreme, malformed or mistyped values, and
arbitrary text, through `singa train --dry-run` in-process on a small job. Every outcome is
exit 0 or a located SingaError within 5 s of CPU time.
"""

from __future__ import annotations

import pytest
from conftest import mlp_conf, write_csv_blobs
from fuzzing import (
    ENUM_NAMES,
    EXTREME_NUMBERS,
    Hang,
    assert_run_or_located_error,
    count,
    fuzz_settings,
    time_limit,
    write_counts,
)
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.schema import job_pb2

runner = CliRunner()


def _field_paths(desc, prefix: str = "", depth: int = 0) -> list[str]:
    out = []
    for f in desc.fields:
        name = f"{prefix}{f.name}"
        if f.message_type is None:
            out.append(name)
        elif depth < 3:
            if f.is_repeated:
                for i in (0, 1, 7):
                    out += _field_paths(f.message_type, f"{name}[{i}].", depth + 1)
            else:
                out += _field_paths(f.message_type, f"{name}.", depth + 1)
        if f.message_type is not None or depth == 0:
            out.append(name)  # a message itself, or a field written without its index
    return out


PATHS = sorted(set(_field_paths(job_pb2.JobProto.DESCRIPTOR)))

VALUES = st.one_of(
    st.sampled_from(EXTREME_NUMBERS),
    st.sampled_from(ENUM_NAMES),
    st.sampled_from(["", "true", "false", '"', "'", '""', "a,b", "1,2,3", "{", "}", "/etc", "/"]),
    st.integers().map(str),
    st.floats().map(str),
    st.text(max_size=40),
    st.text(alphabet="x\\\"'{}[]:,.#", max_size=300),
)

OVERRIDES = st.one_of(
    st.builds(lambda p, v: f"{p}={v}", st.sampled_from(PATHS), VALUES),
    st.builds(lambda p, v: f"{p}{v}", st.sampled_from(PATHS), st.text(max_size=20)),
    st.text(max_size=80),
    st.text(alphabet="abc.[]=0123456789_-", max_size=60),
)


@pytest.fixture(scope="module")
def small_conf(tmp_path_factory):
    d = tmp_path_factory.mktemp("overrides")
    data = write_csv_blobs(d / "blobs.csv")
    conf = d / "job.conf"
    conf.write_text(mlp_conf(data, d / "ws", checkpoint_freq=10))
    yield conf
    write_counts()


@pytest.mark.slow
@fuzz_settings(100)
@given(overrides=st.lists(OVERRIDES, min_size=1, max_size=3))
def test_override_strings(small_conf, monkeypatch, overrides):
    monkeypatch.setenv("SINGA_MEMORY_AVAILABLE", "1G")
    args = ["train", str(small_conf), "--dry-run"]
    for ov in overrides:
        args += ["-o", ov]
    try:
        with time_limit():
            res = runner.invoke(app, args)
    except Hang as exc:
        raise AssertionError(f"hang: {exc}") from None
    if isinstance(res.exception, Hang):
        raise AssertionError(f"hang: {res.exception}")
    assert_run_or_located_error(res)
    count("-o overrides")
