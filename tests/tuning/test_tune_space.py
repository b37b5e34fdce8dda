"""A bad search space is an exit 2 located in the space file, before trial 0, for each kind
of mistake: a path, a distribution that does not fit the field, bounds, a value the field
cannot take, the objective, the budget; and the job checked at the space's corners."""

from __future__ import annotations

import re

import pytest
from tune_jobs import mnist_job, space_file

from tests.conftest import invoke_singa

pytest.importorskip("optuna")

OK_OBJ = 'objective { metric: "accuracy" }\n'
LR = 'param { field: "updater.learning_rate.base_lr" log_uniform { low: 0.001 high: 0.1 } }\n'
CASES = {
    # each: (space text, line:col of the error, words of the message, words of the help)
    "unknown field": ('param { field: "updater.momentun" uniform { low: 0 high: 1 } }\n',
                      "1:9", 'no field "momentun"', 'did you mean "momentum"'),
    "index out of range": (
        'param { field: "neuralnet.layer[9].innerproduct_conf.num_output" int { low: 1 '
        "high: 5 } }\n", "1:9", "index 9 out of range", "indices start at 0"),
    "a message": ('param { field: "updater.learning_rate" uniform { low: 0 high: 1 } }\n',
                  "1:9", "is a message", "FIELD"),
    "range for an enum": ('param { field: "updater.type" uniform { low: 0 high: 1 } }\n',
                          "1:31", "is an enum", "choice"),
    "real range for an int": (
        'param { field: "neuralnet.layer[2].innerproduct_conf.num_output" uniform { low: 1 '
        "high: 5 } }\n", "1:66", "whole number", "int {"),
    "log from 0": ('param { field: "updater.momentum" log_uniform { low: 0 high: 1 } }\n',
                   "1:49", "above 0", "low > 0"),
    "reversed": ('param { field: "updater.momentum" uniform { low: 0.5 high: 0.1 } }\n',
                 "1:54", "empty or reversed", "low < high"),
    "missing bound": ('param { field: "updater.momentum" uniform { low: 0.5 } }\n',
                      "1:35", "has no high", "both bounds"),
    "step not dividing": (
        'param { field: "updater.momentum" uniform { low: 0 high: 1 step: 0.3 } }\n',
        "1:60", "does not divide", "multiple"),
    "bad choice value": ('param { field: "updater.type" choice { value: "kSGD" value: "kFoo" } }\n',
                         "1:54", "cannot be kFoo", "kNesterov"),
    "out of the field's range": (
        'param { field: "neuralnet.layer[2].innerproduct_conf.num_output" int { low: -4 '
        "high: 5 } }\n", "1:72", "at least 1", "num_output"),
    "twice": (LR + LR.replace("0.1 }", "0.2 }"), "2:9", "varied twice", "one param"),
    "no distribution": ('param { field: "updater.momentum" }\n', "1:1", "no distribution",
                        "uniform"),
    "the workspace": ('param { field: "cluster.workspace" choice { value: "a" } }\n', "1:9",
                      "cannot be varied", None),
    "no param": (OK_OBJ, None, "names no field", "param {"),
    "syntax": ('param { field: "updater.momentum" unifrom { low: 0 high: 1 } }\n', "1:35",
               'unknown field "unifrom"', 'did you mean "uniform"'),
    "no validation passes": (LR + "objective { phase: VALIDATION }\n", "2:13",
                             "no validation passes", "validate_steps"),
    "zero trials": (LR + "budget { trials: 0 }\n", "2:10", "trials is 0", "trials:"),
    "bad reduction factor": (LR + "early_stopping { rule: ASHA reduction_factor: 1 }\n",
                             "2:29", "at least 2", "reduction_factor"),
    "a data file that is not there": (
        'param { field: "neuralnet.layer[0].store_conf.path" choice { value: "/nope/x.bin" } }\n',
        None, "/nope/x.bin", "store path"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_space_is_a_located_exit_2_before_trial_0(case, tmp_path, mnist_stores):
    text, linecol, what, helps = CASES[case]
    conf = mnist_job(tmp_path, mnist_stores)
    space = space_file(tmp_path, text)
    study = tmp_path / "study"
    res = invoke_singa("tune", conf, space, "--study", study)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    first = res.output.splitlines()[0]
    if linecol is not None:
        assert first.startswith(f"{space}:{linecol}: error: "), res.output
    else:
        assert re.match(r"\S+: error: ", first), res.output
    assert what in first, res.output
    if helps is not None:
        assert "help: " in res.output and helps in res.output.split("help: ", 1)[1], res.output
    assert not (study / "trials").exists()  # nothing ran, nothing was written


def test_the_space_file_missing_and_the_arguments(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores)
    res = invoke_singa("tune", conf, tmp_path / "nope.conf")
    assert res.exit_code == 2 and "search space file not found" in res.output
    assert "help:" in res.output
    res = invoke_singa("tune", conf)
    assert res.exit_code == 2 and "needs a job.conf and a search space" in res.output
    res = invoke_singa("tune", "--resume")
    assert res.exit_code == 2 and "--resume: error:" in res.output
    res = invoke_singa("tune", "--show", tmp_path / "nothing")
    assert res.exit_code == 2 and "no study folder" in res.output
    res = invoke_singa("tune", conf, space_file(tmp_path, LR), "--trials", "0")
    assert res.exit_code == 2 and "--trials: error:" in res.output


def test_the_core_without_optuna_names_the_extra(tmp_path, mnist_stores, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna fails
    conf = mnist_job(tmp_path, mnist_stores)
    res = invoke_singa("tune", conf, space_file(tmp_path, LR))
    assert res.exit_code == 2, res.output
    assert "singa tune: error: singa tune needs Optuna" in res.output
    assert "singa-classic[tune]" in res.output
