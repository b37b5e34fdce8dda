"""Extension points, proven from the outside: a pip-installed package adds a worker, an
updater, a learning-rate change method and a param generator, each configured through its
own proto extension (AlgProto, UpdaterProto, LRGenProto, ParamGenProto; numbers 101-200),
and a job.conf selects them by ``user_alg`` / ``user_type``.

The package (``singa-foo-ext``, module ``singa_foo``):

* ``kFooAlg``: back-propagation over ``[foo_conf] { repeat: R }`` mini-batches per step,
  each pass sending its gradients (R updates per step);
* ``kFooUpdater``: sign-SGD with momentum ("signum"): ``h <- beta h + (1 - beta) g``,
  ``w <- w - lr * lr_scale * sign(h)``, beta from ``[foo_updater_conf]``;
* ``kFooLR``: linear warm-up to ``base_lr`` over ``warmup_steps``, then cosine decay to
  ``final_lr`` over ``decay_steps``, then ``final_lr`` (``[foo_lr_conf]``);
* ``kFooInit``: a ramp ``start + stride * i`` over the flattened param
  (``[foo_init_conf]``).

Every effect is checked exactly against closed forms, from the real CLI's checkpoints and
metrics.jsonl.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs
from plugin_package import install_plugin_package, pyproject

from singa_core.running import checkpoint as ck

PROTO = """
syntax = "proto2";
package singa_foo;
import "singa_core/schema/job.proto";

// kFooAlg: back-propagation on `repeat` mini-batches per training step
message FooAlgProto {
  optional int32 repeat = 1 [default = 1];
}

// kFooUpdater: sign-SGD with momentum
message FooUpdaterProto {
  optional float beta = 1 [default = 0];
}

// kFooLR: linear warm-up, then cosine decay
message FooLRProto {
  optional int32 warmup_steps = 1 [default = 0];
  optional int32 decay_steps = 2;
  optional float final_lr = 3 [default = 0];
}

// kFooInit: start + stride * i over the flattened param
message FooInitProto {
  optional float start = 1 [default = 0];
  optional float stride = 2 [default = 0];
}

extend singa.AlgProto { optional FooAlgProto foo_conf = 101; }
extend singa.UpdaterProto { optional FooUpdaterProto foo_updater_conf = 101; }
extend singa.LRGenProto { optional FooLRProto foo_lr_conf = 101; }
extend singa.ParamGenProto { optional FooInitProto foo_init_conf = 101; }
"""

PLUGIN = '''
"""singa-foo-ext: one worker, updater, learning-rate change and param generator."""
import math

import numpy as np

from singa_core import hookimpl
from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.param import ParamGenerator
from singa_core.updater import LRChange, Updater, axpy
from singa_core.worker import Worker
from singa_foo import foo_pb2


class FooWorker(Worker):
    """Back-propagation, `repeat` mini-batches (and updates) per training step."""

    def __init__(self, job):
        super().__init__(job)
        self.repeat = int(job.train_one_batch.Extensions[foo_pb2.foo_conf].repeat)
        if self.repeat < 1:
            raise SingaError(
                f"kFooAlg needs foo_conf.repeat >= 1 (got {self.repeat})",
                help="set e.g. `[singa_foo.foo_conf] { repeat: 2 }` in train_one_batch",
            )

    def train_one_batch(self, step, net, stub):
        for _ in range(self.repeat):
            for layer in net.layers:
                for p in layer.params:
                    stub.collect(p)
                layer.forward(kTrain | kForward, net.srclayers(layer))
            for layer in reversed(net.layers):
                layer.backward(kTrain | kBackward, net.srclayers(layer))
                for p in layer.params:
                    stub.update(step, p)

    def test_one_batch(self, phase, net):
        for layer in net.layers:
            layer.forward(phase | kForward, net.srclayers(layer))


class SignumUpdater(Updater):
    """h <- beta * h + (1 - beta) * g;  w <- w - lr * lr_scale * sign(h)."""

    state_names = ("history",)

    def __init__(self, conf, lr):
        super().__init__(conf, lr)
        self.beta = float(conf.Extensions[foo_pb2.foo_updater_conf].beta)
        if not 0.0 <= self.beta < 1.0:
            raise SingaError(
                f"kFooUpdater needs 0 <= foo_updater_conf.beta < 1 (got {self.beta})",
                help="use e.g. `[singa_foo.foo_updater_conf] { beta: 0.9 }`",
            )

    def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        g = self.prologue(value, grad, scale, wd_scale)
        h = state["history"]
        h *= np.float32(self.beta)
        axpy(np.float32(1.0 - self.beta), g, h)
        lr = np.float32(self.lr(step) * lr_scale)
        sign = self.scratch(value)
        np.sign(h, out=sign)
        axpy(-lr, sign, value)


class WarmupCosineLR(LRChange):
    """Linear warm-up to base_lr, cosine decay to final_lr, then final_lr."""

    def __init__(self, conf):
        super().__init__(conf)
        sub = conf.Extensions[foo_pb2.foo_lr_conf]
        self.warmup = int(sub.warmup_steps)
        self.decay = int(sub.decay_steps)
        self.final_lr = float(sub.final_lr)
        if self.decay <= 0 or self.warmup < 0:
            raise SingaError(
                "kFooLR needs foo_lr_conf.decay_steps > 0 and warmup_steps >= 0 "
                f"(got decay_steps {self.decay}, warmup_steps {self.warmup})",
                help="add `[singa_foo.foo_lr_conf] { warmup_steps: 100 decay_steps: 1000 }`",
            )

    def __call__(self, step):
        if step < self.warmup:
            lr = self.base_lr * (step + 1) / self.warmup
        else:
            t = min(step - self.warmup, self.decay)
            cos = (1.0 + math.cos(math.pi * t / self.decay)) / 2.0
            lr = self.final_lr + (self.base_lr - self.final_lr) * cos
        return float(np.float32(lr))


class RampInit(ParamGenerator):
    """value.flat[i] = start + stride * i (float32); draws no random numbers."""

    def fill(self, value, rng):
        sub = self.conf.Extensions[foo_pb2.foo_init_conf]
        ramp = np.arange(value.size, dtype=np.float32) * np.float32(sub.stride)
        value[...] = (ramp + np.float32(sub.start)).reshape(value.shape)


@hookimpl
def singa_register_workers(register):
    register("kFooAlg", FooWorker)


@hookimpl
def singa_register_updaters(register):
    register("kFooUpdater", SignumUpdater)


@hookimpl
def singa_register_lr_changes(register):
    register("kFooLR", WarmupCosineLR)


@hookimpl
def singa_register_param_generators(register):
    register("kFooInit", RampInit)
'''

PYPROJECT = pyproject("singa-foo-ext", "singa_foo", "foo")

# the schedule of the main job: base 1/16, warm-up 4 steps, cosine to 1/64 over 4 steps
BASE_LR, FINAL_LR, WARMUP, DECAY = 0.0625, 0.015625, 4, 4
BETA = 0.75
STEPS = 10

FOO_ALG = 'train_one_batch { alg: kUserAlg user_alg: "kFooAlg" [singa_foo.foo_conf] { repeat: 1 } }'

FOO_UPDATER = f"""updater {{
  user_type: "kFooUpdater"
  [singa_foo.foo_updater_conf] {{ beta: {BETA} }}
  weight_decay: 0.0001
  learning_rate {{
    user_type: "kFooLR" base_lr: {BASE_LR}
    [foo_lr_conf] {{ warmup_steps: {WARMUP} decay_steps: {DECAY} final_lr: {FINAL_LR} }}
  }}
}}
"""

# w2 is (3 classes, 16 hidden): a ramp from -1/4 in steps of 1/128, all exact in float32
FOO_INIT = (
    'init { user_type: "kFooInit" [singa_foo.foo_init_conf] { start: -0.25 stride: 0.0078125 } }'
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The folder singa-foo-ext is pip-installed into (put it on PYTHONPATH)."""
    return install_plugin_package(
        tmp_path_factory.mktemp("foo-ext"),
        "singa-foo-ext",
        {
            "pyproject.toml": PYPROJECT,
            "singa_foo/__init__.py": "",
            "singa_foo/foo.proto": PROTO,
            "singa_foo/plugin.py": PLUGIN,
        },
    )


def foo_job(tmp_path, *, alg=FOO_ALG, updater=FOO_UPDATER, w2_init=FOO_INIT, **kw):
    """(job.conf, workspace): conftest's small MLP with the given algorithm, updater block
    and init of w2."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    ws = tmp_path / "ws"
    text = mlp_conf(data, ws, **kw)
    text, n_alg = re.subn(r"^train_one_batch \{.*\}$", lambda _: alg, text, flags=re.M)
    text, n_upd = re.subn(r"^updater \{\n.*?^\}\n", lambda _: updater, text, flags=re.S | re.M)
    old_init = 'param { name: "w2" init { type: kGaussian std: 0.1 } }'
    assert n_alg == 1 and n_upd == 1 and old_init in text
    text = text.replace(old_init, f'param {{ name: "w2" {w2_init} }}')
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    return conf, ws


def env_with(site_dir):
    return {"PYTHONPATH": str(site_dir)}


def params_at(ws, step):
    return {r.name: r for r in ck.read_params(ws / "checkpoint" / f"step{step}-worker0")}


def history_at(ws, step):
    return ck.read_state(str(ws / "checkpoint" / f"step{step}-worker0") + ck.STATE_SUFFIX).arrays


def train(conf, site_dir):
    res = run_singa("train", str(conf), "--seed", "5", env=env_with(site_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    return res


@pytest.fixture(scope="module")
def foo_run(site, tmp_path_factory):
    """The main job, all four plugin types, trained STEPS steps with a checkpoint per step."""
    tmp = tmp_path_factory.mktemp("foo-run")
    conf, ws = foo_job(tmp, steps=STEPS, checkpoint_freq=1)
    text = conf.read_text()
    assert "disp_freq: 10\n" in text
    conf.write_text(text.replace("disp_freq: 10\n", "disp_freq: 1\n"))  # lr of every step
    res = train(conf, site)
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in lines if r.get("phase") == "train"}
    return res, ws, lrs


def test_list_plugins_shows_all_four(site):
    res = run_singa("list-plugins", env=env_with(site))
    assert res.returncode == 0, res.stderr
    rows = [ln for ln in res.stdout.splitlines() if "kFoo" in ln]
    assert rows[0].startswith("singa-foo-ext 0.1.0"), res.stdout
    for kind, name in [
        ("worker", "kFooAlg"),
        ("updater", "kFooUpdater"),
        ("lr_change", "kFooLR"),
        ("param_generator", "kFooInit"),
    ]:
        assert any(ln.split()[-2:] == [kind, name] for ln in rows), res.stdout
    data = json.loads(run_singa("list-plugins", "--json", env=env_with(site)).stdout)
    plug = {p["name"]: p for p in data["plugins"]}["singa-foo-ext"]
    assert plug["version"] == "0.1.0"
    assert plug["types"] == {
        "worker": ["kFooAlg"],
        "updater": ["kFooUpdater"],
        "lr_change": ["kFooLR"],
        "param_generator": ["kFooInit"],
    }


def test_the_job_runs_with_all_four(foo_run):
    res, ws, lrs = foo_run
    assert "singa-foo-ext-0.1.0" in res.stderr  # the header names the plugins used
    assert sorted(lrs) == list(range(STEPS))
    assert params_at(ws, STEPS)["0#w1"].version == STEPS


def test_param_generator_ramp_is_the_step0_checkpoint(foo_run):
    _, ws, _ = foo_run
    w2 = params_at(ws, 0)["0#w2"].value
    expected = (np.arange(48, dtype=np.float64) / 128 - 0.25).reshape(3, 16)
    assert w2.shape == (3, 16)
    np.testing.assert_array_equal(w2, expected.astype(np.float32))
    # the other params keep their built-in init methods
    assert np.all(params_at(ws, 0)["0#b1"].value == 0)


def test_lr_change_schedule_in_metrics(foo_run):
    _, _, lrs = foo_run
    exact = {
        0: 1 / 64,  # warm-up: base_lr * (step + 1) / 4
        1: 1 / 32,
        2: 3 / 64,
        3: 1 / 16,
        4: 1 / 16,  # cosine from base_lr ...
        6: 5 / 128,  # ... half way: (base_lr + final_lr) / 2
        8: 1 / 64,  # ... to final_lr, where it stays
        9: 1 / 64,
    }
    for step, lr in exact.items():
        assert lrs[step] == lr, (step, lrs)
    for step in (5, 7):
        cos = (1 + math.cos(math.pi * (step - WARMUP) / DECAY)) / 2
        assert lrs[step] == pytest.approx(FINAL_LR + (BASE_LR - FINAL_LR) * cos, rel=1e-6)
    assert lrs[5] > lrs[6] > lrs[7] > lrs[8]


def test_updater_rule_from_checkpoints(foo_run):
    """w_{k+1} = w_k - lr_k * lr_scale * sign(h_{k+1}) exactly, for every param and step;
    h_0 = 0 and h is saved with each checkpoint as '<param>::history'."""
    _, ws, lrs = foo_run
    lr_scale = {"0#w1": 1, "0#b1": 1, "0#w2": 1, "0#b2": 2}  # b2 has lr_scale: 2
    for name in lr_scale:
        np.testing.assert_array_equal(history_at(ws, 0)[f"{name}::history"], 0)
    moved = 0
    for k in range(STEPS):
        before, after, hist = params_at(ws, k), params_at(ws, k + 1), history_at(ws, k + 1)
        for name, scale in lr_scale.items():
            lr = np.float32(lrs[k] * scale)
            sign = np.sign(hist[f"{name}::history"])
            expected = before[name].value - lr * sign
            np.testing.assert_array_equal(after[name].value, expected, err_msg=f"{name} {k}")
            assert after[name].version == k + 1
            moved += int(np.count_nonzero(sign))
    assert moved > 0.9 * STEPS * sum(v.value.size for v in params_at(ws, 0).values())


def test_updater_reads_beta_from_its_extension(site, foo_run, tmp_path):
    """After one step h_1 = (1 - beta) g_0: with beta 0 it is g_0 itself, so the main run's
    h_1 (beta 0.75, same seed, init and data) is exactly 0.25 times it."""
    _, ws, _ = foo_run
    conf, ws0 = foo_job(tmp_path, steps=1, updater=FOO_UPDATER.replace(f"beta: {BETA}", "beta: 0"))
    train(conf, site)
    h_beta0, h_main = history_at(ws0, 1), history_at(ws, 1)
    assert set(h_beta0) == set(h_main) and len(h_main) == 4
    for key, g0 in h_beta0.items():
        assert np.count_nonzero(g0) > 0, key
        np.testing.assert_array_equal(h_main[key], np.float32(1 - BETA) * g0, err_msg=key)


def test_worker_repeat_trains_that_many_batches_per_step(site, tmp_path):
    """kFooAlg with repeat 3 for 4 steps == kBP for 12 steps (same fixed-rate SGD): the same
    12 mini-batches and 12 updates, so bit-identical parameters and versions."""
    sgd = (
        "updater {\n  type: kSGD momentum: 0.9\n  learning_rate { type: kFixed base_lr: 0.05 }\n}\n"
    )
    (tmp_path / "foo").mkdir()
    (tmp_path / "bp").mkdir()
    foo_conf, foo_ws = foo_job(
        tmp_path / "foo",
        steps=4,
        checkpoint_freq=4,
        alg=FOO_ALG.replace("repeat: 1", "repeat: 3"),
        updater=sgd,
        w2_init="init { type: kGaussian std: 0.1 }",
    )
    bp_conf, bp_ws = foo_job(
        tmp_path / "bp",
        steps=12,
        checkpoint_freq=12,
        alg="train_one_batch { alg: kBP }",
        updater=sgd,
        w2_init="init { type: kGaussian std: 0.1 }",
    )
    train(foo_conf, site)
    train(bp_conf, site)
    foo, bp = params_at(foo_ws, 4), params_at(bp_ws, 12)
    assert sorted(foo) == sorted(bp) == ["0#b1", "0#b2", "0#w1", "0#w2"]
    for name in foo:
        assert foo[name].version == bp[name].version == 12, name
        np.testing.assert_array_equal(foo[name].value, bp[name].value, err_msg=name)
    assert not np.array_equal(foo["0#w1"].value, params_at(foo_ws, 0)["0#w1"].value)


@pytest.mark.parametrize(
    ("edit", "message", "where"),
    [
        (
            ('user_alg: "kFooAlg"', 'user_alg: "kFooAlgo"'),
            'unknown algorithm "kFooAlgo"',
            'user_alg: "kFooAlgo"',
        ),
        (
            ("decay_steps: 4 ", ""),
            "kFooLR needs foo_lr_conf.decay_steps > 0",
            "learning_rate {",
        ),
    ],
    ids=["unknown-user-alg", "plugin-rejects-its-conf"],
)
def test_user_errors_are_located_with_help(site, tmp_path, edit, message, where):
    conf, _ = foo_job(tmp_path, steps=2)
    text = conf.read_text()
    assert edit[0] in text
    text = text.replace(edit[0], edit[1])
    conf.write_text(text)
    res = run_singa("train", str(conf), env=env_with(site))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert message in res.stderr and "help:" in res.stderr, res.stderr
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if where in ln)
    assert f"job.conf:{line}:" in res.stderr, res.stderr  # located at the offending line


@pytest.mark.parametrize(
    "field",
    ["train_one_batch.[singa_foo.foo_conf].repeat", "train_one_batch.[foo_conf].repeat"],
    ids=["full-name", "short-name"],
)
def test_override_sets_an_extension_field(site, tmp_path, field):
    """`-o` writes extension fields as job.conf does: with repeat 2 from the command line
    (the file says 1), 3 steps make 6 updates."""
    conf, ws = foo_job(
        tmp_path, steps=3, checkpoint_freq=3, w2_init="init { type: kGaussian std: 0.1 }"
    )
    res = run_singa("train", str(conf), "--seed", "5", "-o", f"{field}=2", env=env_with(site))
    assert res.returncode == 0, res.stdout + res.stderr
    assert params_at(ws, 3)["0#w1"].version == 6


@pytest.mark.parametrize(
    ("override", "message", "hint"),
    [
        (
            "train_one_batch.[foo_cnf].repeat=2",
            'AlgProto has no extension "[foo_cnf]"',
            'did you mean "[foo_conf]"',
        ),
        (
            "train_one_batch.[singa_foo.foo_conf].repaet=2",
            'FooAlgProto has no field "repaet"',
            'did you mean "repeat"?',
        ),
        (
            "updater.[singa_foo.foo_updater_conf].beta=2",
            "kFooUpdater needs 0 <= foo_updater_conf.beta < 1 (got 2.0)",
            "beta: 0.9",
        ),
        (
            "neuralnet.layer[1].[foo_conf].repeat=2",
            'LayerProto has no extension "[foo_conf]"',
            "no installed plugin extends LayerProto",
        ),
    ],
    ids=["unknown-extension", "unknown-field-inside", "value-reaches-plugin", "wrong-message"],
)
def test_override_extension_errors(site, tmp_path, override, message, hint):
    conf, _ = foo_job(tmp_path, steps=2)
    res = run_singa("train", str(conf), "-o", override, env=env_with(site))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert message in res.stderr and hint in res.stderr, res.stderr
