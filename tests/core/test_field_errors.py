"""Every range error of a numeric field points at that field's own line (or the ``-o`` that
set it) and says how to fix it: one case per kind of field, and an audit of the code that
raises them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import run_singa

from singa_core.testing import blobs_csv, mlp_job

REPO = Path(__file__).resolve().parents[2]

# (kind of field, text in the base job, the same field made wrong, its -o path and value)
CASES = [
    (
        "layer int",
        "num_output: 16",
        "num_output: 0",
        "neuralnet.layer[1].innerproduct_conf.num_output=0",
    ),
    (
        "layer repeated int",
        "batchsize: 20",
        "batchsize: -5",
        "neuralnet.layer[0].store_conf.batchsize=-5",
    ),
    (
        "layer float",
        "dropout_ratio: 0.5",
        "dropout_ratio: 1.5",
        "neuralnet.layer[2].dropout_conf.dropout_ratio=1.5",
    ),
    ("job int", "train_steps: 60", "train_steps: -1", "train_steps=-1"),
    ("updater float", "momentum: 0.9", "momentum: -0.5", "updater.momentum=-0.5"),
    (
        "learning-rate sub-message",
        "gamma: 0.001",
        "gamma: -1",
        "updater.learning_rate.inverse_conf.gamma=-1",
    ),
]


def _base(tmp_path) -> str:
    data = blobs_csv(tmp_path / "blobs.csv", n=60)
    conf = mlp_job(
        data,
        updater="type: kNesterov momentum: 0.9 learning_rate { type: kInverse base_lr: 0.05 "
        "inverse_conf {\n gamma: 0.001 pow: 0.75 } }",
        hidden_layer="type: kDropout dropout_conf {\n dropout_ratio: 0.5 }",
    )
    # one field a line where the kit puts several on one: the column is checked too
    return conf.replace("batchsize: 20", "\n      batchsize: 20").replace(
        "innerproduct_conf { num_output: 16 }", "innerproduct_conf {\n num_output: 16 }"
    )


def invoke(args: list[str]) -> tuple[int, str, str]:
    res = run_singa(*args)
    return res.returncode, res.stdout, res.stderr


def _line_col(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


@pytest.mark.parametrize("kind,good,bad,override", CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_in_the_file_is_reported_at_its_own_line(tmp_path, kind, good, bad, override):
    base = _base(tmp_path)
    assert good in base
    conf = tmp_path / "job.conf"
    conf.write_text(base.replace(good, bad, 1))
    code, out, err = invoke(["train", str(conf), "--dry-run", "--workspace", str(tmp_path / "w")])
    assert code == 2, out + err
    line, col = _line_col(conf.read_text(), bad)
    assert f"{conf}:{line}:{col}: error:" in err, err
    assert "\nhelp: " in err, err
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("kind,good,bad,override", CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_from_the_command_line_is_reported_at_its_o(
    tmp_path, kind, good, bad, override
):
    conf = tmp_path / "job.conf"
    conf.write_text(_base(tmp_path))
    args = ["train", str(conf), "--dry-run", "--workspace", str(tmp_path / "w"), "-o", override]
    code, out, err = invoke(args)
    assert code == 2, out + err
    assert err.startswith(f"command line: -o {override}: error:"), err
    assert "\nhelp: " in err, err


def test_the_base_job_is_fine(tmp_path):
    conf = tmp_path / "job.conf"
    conf.write_text(_base(tmp_path))
    code, out, err = invoke(["train", str(conf), "--dry-run", "--workspace", str(tmp_path / "w")])
    assert code == 0, out + err


# -- the audit: every range check names its own field and says how to fix it ---------------
_RANGE = re.compile(r"must|positive|>= ?0|> ?0|at least|in \[|not be 0|not be negative")
# checks about a whole sub-message (counts of repeated fields), not one value
_WHOLE_MESSAGE = {("plugins/lr_changes/fixed_step.py", "fixedstep_conf")}


def _raise_sites():
    for path in sorted([*REPO.glob("plugins/**/*.py"), *REPO.glob("singa_core/**/*.py")]):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in ("error", "SingaError"):
                continue
            message = ast.unparse(node.args[0])
            if _RANGE.search(message):
                yield rel, node.lineno, name, {k.arg: k.value for k in node.keywords}, message


def test_every_range_error_has_a_help_line():
    missing = [f"{r}:{n}" for r, n, _, kw, _ in _raise_sites() if "help" not in kw]
    assert missing == [], f"range errors without a help line: {missing}"


def test_every_layer_range_error_names_a_field_not_its_block():
    wrong = []
    for rel, lineno, name, kw, _ in _raise_sites():
        if name != "error" or "field" not in kw:
            continue
        field = kw["field"]
        if isinstance(field, ast.Constant) and str(field.value).endswith("_conf"):
            if (rel, field.value) not in _WHOLE_MESSAGE:
                wrong.append(f"{rel}:{lineno} field={field.value!r}")
    assert wrong == [], "range errors located at a whole block, not the field: " + str(wrong)


def test_the_audit_sees_the_range_checks():
    sites = list(_raise_sites())
    assert len(sites) > 25
    assert any(r == "plugins/layers/dropout.py" for r, *_ in sites)
