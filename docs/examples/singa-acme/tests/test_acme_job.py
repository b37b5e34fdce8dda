import numpy as np
from singa_core.testing import blobs_csv, mlp_job, run_job


def test_prelu_trains_in_a_small_mlp(tmp_path):
    data = blobs_csv(tmp_path / "d.csv")
    run = run_job(mlp_job(data, hidden_layer='user_type: "kPReLU"', steps=60), tmp_path)
    train = run.phase("train")
    assert train[-1]["loss"] < train[0]["loss"] and run.checkpoints[60]["0#w1"].shape == (16, 4)
    # no param { } entry: the slope started at init_alpha, the layer's default (then learned)
    alpha = next(v for k, v in run.checkpoints[60].items() if k.endswith("alpha"))
    assert alpha.shape == (1,) and not np.allclose(alpha, 0.25)
