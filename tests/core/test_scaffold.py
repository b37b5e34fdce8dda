"""`singa new-plugin`'s choices and its user errors (fast; the packages it writes are
installed and run in tests/test_plugin_scaffold.py)."""

from __future__ import annotations

from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.scaffold import EXTENSION_RANGES, field_number, names


def run(*args):
    return CliRunner().invoke(app, ["new-plugin", *args])


def test_field_numbers_are_spread_over_the_range_and_stable():
    numbers = [field_number(f"singa_p{i}", "singa.AlgProto") for i in range(400)]
    assert all(101 <= n <= 200 for n in numbers)
    assert len(set(numbers)) > 90  # the slots are used evenly, not the first one
    assert field_number("singa_gate", "singa.LayerProto") == field_number(
        "singa_gate", "singa.LayerProto"
    )
    lo, hi = EXTENSION_RANGES["singa.LayerProto"]
    assert lo <= field_number("singa_gate", "singa.LayerProto") <= hi == 1100


def test_names_derived_from_the_plugin_name():
    v = names("scaled-tanh")
    assert (v["project"], v["package"], v["Type"], v["ext"]) == (
        "singa-scaled-tanh",
        "singa_scaled_tanh",
        "kScaledTanh",
        "scaled_tanh_conf",
    )
    assert names("singa-gate")["project"] == "singa-gate"


def test_field_number_option(tmp_path):
    res = run("gate", "--kind", "worker", "--out", str(tmp_path), "--field-number", "150")
    assert res.exit_code == 0, res.output
    proto = (tmp_path / "singa-gate" / "singa_gate" / "gate.proto").read_text()
    assert "gate_conf = 150;" in proto


def test_user_errors_exit_2_with_help(tmp_path):
    cases = [
        (["Bad_Name", "--kind", "layer"], "not a lowercase name", "help: use letters"),
        (["gate", "--kind", "optimizer"], "unknown plugin kind 'optimizer'", "help: --kind is"),
        (["gate", "--kind", "layer", "--field-number", "150"], "outside the range", "1001"),
        (["gate", "--kind", "store", "--field-number", "150"], "no configuration message", ""),
    ]
    for args, what, hint in cases:
        res = run(*args, "--out", str(tmp_path))
        assert res.exit_code == 2, (args, res.output)
        assert what in res.output and hint in res.output and "Traceback" not in res.output
    assert run("gate", "--kind", "lr", "--out", str(tmp_path)).exit_code == 0
    again = run("gate", "--kind", "lr", "--out", str(tmp_path))
    assert again.exit_code == 2 and "already exists and is not empty" in again.output
