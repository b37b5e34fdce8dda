"""kScale with the kit: its contract, and a small MLP trained with it in job.conf."""

import numpy as np
from singa_core.testing import blobs_csv, check_layer, mlp_job, run_job

CONF = 'name: "scaled" user_type: "kScale" [singa_scale.scale_conf] { alpha: 0.5 }'


def test_contract():
    x = np.random.default_rng(0).standard_normal((4, 6))
    report = check_layer("kScale", CONF, [x], shape=(4, 6))
    np.testing.assert_allclose(report.layer.data, 0.5 * x.astype(np.float32), rtol=1e-6)


def test_alpha_defaults_to_one():
    x = np.random.default_rng(1).standard_normal((3, 5))
    report = check_layer("kScale", 'name: "s" user_type: "kScale"', [x], shape=(3, 5))
    np.testing.assert_array_equal(report.layer.data, x.astype(np.float32))


def test_trains_in_a_job(tmp_path):
    hidden = 'user_type: "kScale" [scale_conf] { alpha: 0.5 }'
    run = run_job(mlp_job(blobs_csv(tmp_path / "d.csv"), hidden_layer=hidden), tmp_path)
    train = run.phase("train")
    assert train[-1]["loss"] < train[0]["loss"]
