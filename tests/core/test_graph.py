"""`singa train --dry-run --graph FILE`: the nets as Graphviz dot, parsed back: the MNIST
MLP (train and test nets) and a partitioned example (bridges between the workers'
clusters, replicas' shared Params, the placement note); rendering with and without dot."""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import REPO, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()
NODE = re.compile(r'^\s*"([^"]+)" \[label="((?:[^"\\]|\\.)*)"')
EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)"(?: \[(.*)\])?;$')
CLUSTER = re.compile(r'^\s*subgraph "(cluster_[^"]+)" \{$')


def parse_dot(text: str):
    """(nodes: id -> label lines, edges: [(tail, head, attrs)], clusters: id -> node ids)."""
    nodes, edges, clusters, stack = {}, [], {}, []
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    for line in text.splitlines():
        if m := CLUSTER.match(line):
            stack.append(m.group(1))
            clusters[m.group(1)] = []
        elif line.strip() == "}" and stack:
            stack.pop()
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3) or ""))
        elif m := NODE.match(line):
            nodes[m.group(1)] = m.group(2).replace('\\"', '"').split("\\n")
            for c in stack:
                clusters[c].append(m.group(1))
    return nodes, edges, clusters


def dry_run_graph(conf, stores, tmp_path, out, *extra):
    args = [*mnist_example_args(stores), "-o", f"cluster.workspace={tmp_path / 'ws'}"]
    res = runner.invoke(app, ["train", str(conf), *args, *extra, "--dry-run", "--graph", str(out)])
    assert res.exit_code == 0, res.output
    return res


def test_mnist_mlp_graph(mnist_stores, tmp_path):
    out = tmp_path / "mlp.dot"
    res = dry_run_graph(REPO / "examples" / "mnist" / "job.conf", mnist_stores, tmp_path, out)
    assert f"wrote {out}" in res.output
    assert not (tmp_path / "ws").exists()  # a dry run writes only the graph
    nodes, edges, clusters = parse_dot(out.read_text())
    train = [n for n in nodes if n.startswith("kTrain/")]
    test = [n for n in nodes if n.startswith("kTest/")]
    assert len(train) == len(test) == 13
    assert set(clusters["cluster_kTrain"]) == set(train)
    assert nodes["kTrain/fc1"] == ["fc1", "kInnerProduct", "64x2500", "w1 2500x784", "b1 2500"]
    assert nodes["kTest/fc1"][:3] == ["fc1", "kInnerProduct", "100x2500"]
    assert nodes["kTrain/loss"][:3] == ["loss", "kSoftmaxLoss", "64x10"]
    chain = ["data", "fc1", "tanh1", "fc2", "tanh2", "fc3", "tanh3", "fc4", "tanh4", "fc5"]
    chain += ["tanh5", "fc6", "loss"]
    train_edges = {(t, h) for t, h, _ in edges if t.startswith("kTrain/")}
    want = {(f"kTrain/{a}", f"kTrain/{b}") for a, b in zip(chain, chain[1:], strict=False)}
    assert train_edges == want | {("kTrain/data", "kTrain/loss")}
    note = nodes["placement"]
    assert note[0] == "placement" and note[1].startswith("engine: inprocess")


def test_partitioned_graph(mnist_stores, tmp_path):
    """The in-memory Sandblaster example (2 workers, batch split) with fc2 split on its
    outputs: bridges connect the two workers' clusters."""
    out = tmp_path / "sb.gv"
    conf = REPO / "examples" / "frameworks" / "inmemory-sandblaster.conf"
    dry_run_graph(
        conf, mnist_stores, tmp_path, out, "-o", "neuralnet.layer[4].partition_dim=1",
        "-o", "test_steps=0",
    )  # fmt: skip
    nodes, edges, clusters = parse_dot(out.read_text())
    w0 = set(clusters["cluster_kTrain_worker0"])
    w1 = set(clusters["cluster_kTrain_worker1"])
    assert w0 and w1 and not w0 & w1
    assert "kTrain/fc1@0" in w0 and "kTrain/fc1@1" in w1
    assert nodes["kTrain/fc1@0"][2:] == ["32x2500", "w1 2500x784", "b1 2500"]
    assert nodes["kTrain/fc1@1"][3:] == ["w1@1 = w1", "b1@1 = b1"]  # batch replicas share
    assert nodes["kTrain/fc2@1"][3:] == ["w2@1 1000x2500", "b2@1 1000"]  # own half
    crossing = [(t, h, a) for t, h, a in edges if (t in w0) != (h in w0)]
    assert crossing and all("bridge_src" in t and "bridge_dst" in h for t, h, _ in crossing)
    assert all("color=red" in a for _, _, a in crossing)
    assert len(crossing) == 4  # two bridged edges, each way
    assert any('label="[1]"' in a for _, _, a in edges)  # a slice's part
    assert "2 workers" in "\n".join(nodes["placement"]) or "workers 0-1" in "\n".join(
        nodes["placement"]
    )


def test_rendered_formats(mnist_stores, tmp_path, monkeypatch):
    conf = REPO / "examples" / "mnist" / "job.conf"
    if shutil.which("dot"):
        res = dry_run_graph(conf, mnist_stores, tmp_path, tmp_path / "mlp.svg")
        assert (tmp_path / "mlp.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    monkeypatch.setattr(shutil, "which", lambda name: None)  # as without Graphviz
    res = dry_run_graph(conf, mnist_stores, tmp_path, tmp_path / "net.png")
    assert "Graphviz's dot is not installed" in res.output
    assert (tmp_path / "net.dot").read_text().startswith("digraph ")
    assert not (tmp_path / "net.png").exists()


def test_graph_errors(tmp_path, small_job):
    conf, _ = small_job()
    res = runner.invoke(app, ["train", str(conf), "--graph", str(tmp_path / "g.dot")])
    assert res.exit_code == 2 and "--graph: error: --graph writes the net of a dry run" in (
        res.output
    )
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "--graph", str(tmp_path / "g.txt")])
    assert res.exit_code == 2 and "cannot tell the graph format" in res.output
    assert "help: name a .dot" in res.output


@pytest.mark.parametrize("name", ['a"b', "x\\y"])
def test_quoting(name):
    from singa_core.commands.graph import _q

    assert _q(name).startswith('"') and _q(name).count('"') - _q(name).count('\\"') == 2
