"""The cluster registry's log chunks and stops (plugins/engines/ray/registry.py) over an
in-memory key-value store, and the one-line reasons a machine cannot be a driver
(plugins/engines/ray/membership.py). The same code against a real GCS runs in
tests/engines/test_ray_cluster_losses.py."""

from __future__ import annotations

from singa_builtins.engines.ray import registry as reg
from singa_builtins.engines.ray.membership import driver_problem


class Store(reg.Registry):
    def __init__(self) -> None:  # no GCS: a dict
        self.kv: dict[str, bytes] = {}

    def get(self, key):
        return self.kv.get(key)

    def put(self, key, value, overwrite=True):
        if key in self.kv and not overwrite:
            return False
        self.kv[key] = value.encode() if isinstance(value, str) else value
        return True

    def keys(self, prefix):
        return sorted(k for k in self.kv if k.startswith(prefix))

    def delete(self, key, by_prefix=False):
        gone = [k for k in self.kv if (k.startswith(key) if by_prefix else k == key)]
        for k in gone:
            del self.kv[k]
        return len(gone)


def test_a_growing_log_is_read_back_whole_from_any_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(reg, "CHUNK", 10)
    monkeypatch.setattr(reg, "KEEP", 40)
    store, log = Store(), tmp_path / "log"
    shipper = reg.LogShipper(store, "j1", log)
    text = b""
    for k in range(9):
        line = f"Train step-{k}, loss = {k}\n".encode()
        text += line
        with open(log, "ab") as fh:
            fh.write(line)
        assert shipper.ship()
        rec = {"id": "j1", "log_size": shipper.size, "log_start": shipper.start}
        data, nxt, skipped = store.log_since(rec, 0)
        assert nxt == len(text) and data == text[skipped:]
        assert len(data) <= 40 + 10  # the newest KEEP bytes (whole chunks) are kept
    assert skipped > 0  # the oldest chunks are gone, and said to be
    # a follower that read up to some offset gets exactly the rest
    half = len(text) - 15
    data, nxt, skipped = store.log_since(rec, half)
    assert data == text[half:] and skipped == 0 and nxt == len(text)
    assert len(store.keys("log:j1:")) <= 5  # older chunks removed


def test_the_first_stop_is_sent_once_and_now_overrides():
    store = Store()
    assert store.ask_stop("j1", False, "a@x", 1.0)
    assert not store.ask_stop("j1", False, "b@y", 2.0)  # already stopping: nothing more
    assert store.ask_stop("j1", True, "b@y", 3.0)
    assert store.stop_asked("j1")["now"] is True


def test_a_machine_that_is_not_a_node_or_in_another_pid_namespace_is_told_why():
    nodes = ["10.0.0.1", "10.0.0.2"]
    err = driver_problem("10.0.0.1:6379", "10.0.0.1:6379", nodes, "10.0.0.3", False, {"10.0.0.3"})
    text = err.format()
    assert "this machine (10.0.0.3) is not a node of the cluster at 10.0.0.1:6379" in text
    assert "`ray start --address 10.0.0.1:6379` first" in text and "firewall" not in text
    err = driver_problem("h:6379", "10.0.0.1:6379", nodes, "10.0.0.2", False, {"10.0.0.2"})
    assert "runs its raylet in another PID namespace" in err.format()
    assert "--pid=host" in err.format()
    # Ray still lists this machine's node from before a restart; no raylet answers here
    err = driver_problem("h:6379", "10.0.0.1:6379", nodes, "10.0.0.2", False, {"10.0.0.2"},
                         raylet_answers=False)  # fmt: skip
    text = err.format()
    assert "this machine (10.0.0.2) is not a node of the cluster at h:6379: `ray start " in text
    assert "from before it restarted" in text and "PID namespace" not in text
    # a node, raylet visible: no problem; an address of another interface counts too
    assert driver_problem("h:6379", "10.0.0.1:6379", nodes, "10.0.0.2", True) is None
    assert driver_problem("h:6379", "127.0.0.1:6379", nodes, "127.0.0.1", True,
                          {"127.0.0.1", "10.0.0.1"}) is None  # fmt: skip


def test_the_records_step_and_loss_are_the_logs_newest_display_line(tmp_path, monkeypatch):
    """`singa jobs --address` shows what the job's runner last put in its record (every
    PROGRESS_EVERY s): the newest `Train step-N` line of the log with its loss and
    accuracy, also when the workspace's metrics.jsonl is behind it."""
    import json

    from singa_builtins.engines.ray import jobrunner

    store = Store()
    monkeypatch.setattr(jobrunner, "Registry", lambda gcs: store)
    ws, log = tmp_path / "ws", tmp_path / "log"
    ws.mkdir()
    (ws / "metrics.jsonl").write_text(
        json.dumps({"event": "start", "job": "j1", "train_steps": 600, "step": 0}) + "\n"
        + json.dumps({"phase": "train", "step": 30, "loss": 0.9}) + "\n"
    )  # fmt: skip
    log.write_text(
        "singa 0.1.0 | job 'small' starting | seed 1 | engine ray | plugins: x\n"
        "Train step-30, loss = 0.9, accuracy = 0.6\n"
        "Train step-40, loss = 0.51, accuracy = 0.83\n"
    )
    spec = {"record": {"id": "j1", "cwd": str(tmp_path), "workspace": "ws"}, "train_args": [],
            "gcs": "h:1", "supervisor": [0, ""], "raylet": [0, ""], "log": str(log)}  # fmt: skip
    runner = jobrunner.Runner(spec)
    assert jobrunner.PROGRESS_EVERY <= 2.0
    runner.progress()
    runner.put()
    rec = store.record("j1")
    assert rec["step"] == 40 and rec["total"] == 600, rec
    assert rec["metrics"]["loss"] == 0.51 and rec["metrics"]["accuracy"] == 0.83, rec
