"""Cross-check against PyTorch (optional reference; skipped where torch is not installed).

The same MLP, the same initial values, the same mini-batches: a few SGD steps with
momentum and weight decay in singa's BP worker, SGD updater and layers must give the
parameters PyTorch computes.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import mlp_conf, write_csv_blobs

from singa_core.jobconf.parse import load_job
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.running.reporting import Reporter

torch = pytest.importorskip("torch")


def test_sgd_steps_match_pytorch(tmp_path):
    data = write_csv_blobs(tmp_path / "d.csv", n=100)
    text = mlp_conf(data, tmp_path / "ws", hidden=8, momentum=0.9).replace(
        "random_skip: 10", "random_skip: 0"
    )
    text = text.replace(
        "type: kStep base_lr: 0.05 step_conf { change_freq: 20 gamma: 0.9 }",
        "type: kFixed base_lr: 0.05",
    )
    path = tmp_path / "job.conf"
    path.write_text(text)
    prepared = prepare_job(load_job(path), get_host(), seed=0)
    engine = get_host().get("engine", "inprocess")(prepared, Reporter(quiet=True))
    engine._init_params()
    net = engine.train_net
    p = {q.name: q for q in net.params}

    lin1, lin2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
    with torch.no_grad():
        for lin, w, b in ((lin1, "w1", "b1"), (lin2, "w2", "b2")):
            lin.weight.copy_(torch.from_numpy(p[w].value.copy()))
            lin.bias.copy_(torch.from_numpy(p[b].value.copy()))
    # SINGA: wd_scale 0 and lr_scale 2 on b2
    opt = torch.optim.SGD(
        [
            {"params": [lin1.weight, lin1.bias, lin2.weight], "weight_decay": 1e-4},
            {"params": [lin2.bias], "weight_decay": 0.0, "lr": 0.1},
        ],
        lr=0.05,
        momentum=0.9,
    )
    rows = np.loadtxt(data, delimiter=",", dtype=np.float64)
    loop = engine._loop()
    for step in range(5):
        engine.worker.train_one_batch(step, net, loop.stub)
        batch = rows[step * 20 : (step + 1) * 20]
        x = torch.tensor(batch[:, 1:], dtype=torch.float32)
        y = torch.tensor(batch[:, 0], dtype=torch.long)
        opt.zero_grad()
        h = 1.7159047 * torch.tanh(0.66666667 * lin1(x))
        torch.nn.functional.cross_entropy(lin2(h), y).backward()
        opt.step()
    for lin, w, b in ((lin1, "w1", "b1"), (lin2, "w2", "b2")):
        np.testing.assert_allclose(p[w].value, lin.weight.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(p[b].value, lin.bias.detach().numpy(), rtol=1e-4, atol=1e-5)
