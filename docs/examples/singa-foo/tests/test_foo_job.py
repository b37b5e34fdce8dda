"""The four types in one job (docs' job.conf lines), their effects checked exactly: the ramp
in the step-0 checkpoint, the schedule in metrics.jsonl, `repeat` updates per step."""

import math

import numpy as np
from singa_core.testing import blobs_csv, mlp_job, run_job

UPDATER = """
  user_type: "kFooUpdater"
  [singa_foo.foo_updater_conf] { beta: 0.9 }
  weight_decay: 0.0001
  learning_rate {
    user_type: "kFooLR" base_lr: 0.01
    [foo_lr_conf] { warmup_steps: 4 decay_steps: 10 final_lr: 0.0001 }
  }
"""
RAMP = 'param { name: "w1" init { user_type: "kFooInit" [foo_init_conf] { start: -0.1 stride: 0.001 } } }'  # noqa: E501


def expected_lr(step):
    if step < 4:
        return 0.01 * (step + 1) / 4
    t = min(step - 4, 10)
    return 0.0001 + (0.01 - 0.0001) * (1 + math.cos(math.pi * t / 10)) / 2


def test_the_four_types_in_one_job(tmp_path):
    alg = 'alg: kUserAlg user_alg: "kFooAlg" [singa_foo.foo_conf] { repeat: 2 }'
    conf = mlp_job(blobs_csv(tmp_path / "d.csv"), alg=alg, updater=UPDATER, steps=20)
    conf = conf.replace('param { name: "w1" init { type: kUniform low: -0.3 high: 0.3 } }', RAMP)
    conf = conf.replace("disp_freq: 10", "disp_freq: 1\ncheckpoint_freq: 20")
    run = run_job(conf, tmp_path)
    w1 = run.checkpoints[0]["0#w1"]
    ramp = np.float32(-0.1) + np.arange(w1.size, dtype=np.float32) * np.float32(0.001)
    np.testing.assert_array_equal(w1.reshape(-1), ramp)
    train = run.phase("train")
    for record in train:
        assert math.isclose(record["lr"], expected_lr(record["step"]), rel_tol=1e-6)
    assert train[-1]["loss"] < train[0]["loss"]
