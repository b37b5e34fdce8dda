"""Every built-in worker passes the plugin author's kit's worker contract
(``singa_core.testing.check_worker``: Params collected before a layer uses them, each
gradient sent once per step, finite and non-zero, test batches leave Params alone), and
the check catches workers that break the protocol."""

from __future__ import annotations

import pytest
from conftest import mlp_conf, write_csv_blobs

from singa_core.layer import kBackward, kForward, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.testing import check_worker
from singa_core.worker import Worker
from tests.core.test_unrolling import gru_lm_conf
from tests.workers.test_cd import rbm_conf, unit_blobs


def _bp(tmp_path):
    return mlp_conf(write_csv_blobs(tmp_path / "d.csv"), tmp_path / "ws")


def _cd(tmp_path):
    return rbm_conf(unit_blobs(tmp_path / "d.csv"), tmp_path / "ws", cd_k=2)


def _bptt(tmp_path):
    return gru_lm_conf(write_csv_blobs(tmp_path / "d.csv", n=20), tmp_path / "ws")


JOBS = {"kBP": _bp, "kCD": _cd, "kBPTT": _bptt}


def test_every_builtin_worker_is_checked():
    registry = get_host().registries["worker"]
    builtin = {
        name
        for name, entry in registry.entries.items()
        if entry.provider.dist == "singa-classic" and entry.alias_of is None
    }
    assert builtin == set(JOBS)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_worker_contract(name, tmp_path):
    stub = check_worker(JOBS[name](tmp_path), steps=2)
    assert any(e[0] == "collect" for e in stub.events)


class _Sloppy(Worker):
    """Back-propagation that collects each Param once, at its first step only, and sends
    the last layer's gradients twice."""

    seen = False

    def train_one_batch(self, step, net, stub):
        if not self.seen:
            for p in net.params:
                stub.collect(p)
            self.seen = True
        for layer in net.layers:
            layer.forward(kTrain | kForward, net.srclayers(layer))
        for layer in reversed(net.layers):
            layer.backward(kTrain | kBackward, net.srclayers(layer))
            for p in layer.params:
                stub.update(step, p)
        for p in net.layers[-2].params:
            stub.update(step, p)

    def test_one_batch(self, phase, net):
        pass


def test_check_worker_catches_a_sloppy_worker(tmp_path, monkeypatch):
    host = get_host()
    monkeypatch.setitem(host.registries["worker"].entries["kBP"].__dict__, "obj", _Sloppy)
    with pytest.raises(AssertionError) as err:
        check_worker(_bp(tmp_path), steps=2)
    text = str(err.value)
    assert "sent twice" in text
    assert "before its Param w1 was collected" in text
