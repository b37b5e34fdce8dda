"""Plugin discovery: entry points, broken plugins, name conflicts, list-plugins."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import run_singa

from singa_core.errors import SingaError
from singa_core.plugin_host.host import PluginHost

LAYER_PLUGIN = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer


class Twin(NeuronLayer):
    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = srcs[0].data


@hookimpl
def singa_register_layers(register):
    register("kTwin", Twin)
"""


def fake_dist(root, dist: str, module: str, source: str, version: str = "0.1") -> None:
    """A minimal installed distribution (dist-info + module) under ``root``."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[singa]\n{module} = {module}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_broken_plugin_is_reported_and_skipped(site):
    fake_dist(site, "singa-broken", "singa_broken_plugin", "raise ImportError('no libfoo')\n")
    host = PluginHost()
    host.load_entry_points()
    (failure,) = [f for f in host.failures if f.plugin == "singa_broken_plugin"]
    assert failure.dist == "singa-broken 0.1" and "no libfoo" in failure.error
    assert "kInnerProduct" in host.registry("layer").names()  # everything else works
    with pytest.raises(SingaError) as info:
        host.get("layer", "kBrokenThing")
    assert any("singa_broken_plugin" in n and "singa-broken 0.1" in n for n in info.value.notes)


def test_strict_mode_reraises(site, monkeypatch):
    fake_dist(site, "singa-broken", "singa_broken_plugin2", "raise ImportError('boom')\n")
    monkeypatch.setenv("SINGA_STRICT_PLUGINS", "1")
    with pytest.raises(ImportError):
        PluginHost().load_entry_points()


def test_two_plugins_claiming_one_name(site):
    fake_dist(site, "singa-twin-a", "singa_twin_a", LAYER_PLUGIN)
    fake_dist(site, "singa-twin-b", "singa_twin_b", LAYER_PLUGIN)
    host = PluginHost()
    host.load_entry_points()
    with pytest.raises(SingaError) as info:
        host.get("layer", "kTwin")
    msg = info.value.message
    assert "singa-twin-a 0.1" in msg and "singa-twin-b 0.1" in msg
    assert info.value.help


def test_disable_plugins(site, monkeypatch):
    fake_dist(site, "singa-twin-a", "singa_twin_a2", LAYER_PLUGIN.replace("kTwin", "kTwinA"))
    monkeypatch.setenv("SINGA_DISABLE_PLUGINS", "singa-twin-a")
    host = PluginHost()
    host.load_entry_points()
    assert "kTwinA" not in host.registry("layer").names()


def test_registration_checks_the_contract(site):
    fake_dist(
        site,
        "singa-bad",
        "singa_bad_contract",
        """
        from singa_core import hookimpl

        @hookimpl
        def singa_register_layers(register):
            register("kNotALayer", object)
        """,
    )
    host = PluginHost()
    host.load_entry_points()
    (f,) = [f for f in host.failures if f.plugin == "singa_bad_contract"]
    assert "subclass of singa_core.layer.Layer" in f.error


def test_list_plugins_table_and_json(site):
    fake_dist(site, "singa-twin-a", "singa_twin_a3", LAYER_PLUGIN)
    fake_dist(site, "singa-broken", "singa_broken_plugin3", "raise RuntimeError('bad')\n")
    env = {"PYTHONPATH": str(site)}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    assert "singa-classic 0.1.0" in res.stdout
    assert "kInnerProduct" in res.stdout and "kSGD" in res.stdout
    assert "singa-twin-a 0.1" in res.stdout and "kTwin" in res.stdout
    assert "singa_broken_plugin3" in res.stderr and "bad" in res.stderr
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    by_name = {p["name"]: p for p in data["plugins"]}
    assert "kBP" in by_name["singa-classic"]["types"]["worker"]
    assert by_name["singa-twin-a"]["types"]["layer"] == ["kTwin"]
    assert data["failed"][0]["plugin"] == "singa_broken_plugin3"


# -- two namespaces: type: kEmbedding (built-in enum) and user_type: "kEmbedding" ----------
USER_EMBEDDING_PLUGIN = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer


class Doubler(NeuronLayer):
    \"\"\"A user's own "kEmbedding" (0.3's rnnlm did this): y = 2x.\"\"\"

    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = 2 * srcs[0].data

    def backward(self, phase, srcs):
        g = srcs[0].grad_for(self)
        if g is not None:
            g[...] = 2 * self.grad


@hookimpl
def singa_register_layers(register):
    register("kEmbedding", Doubler, user_type=True)
    register("kDoubler", Doubler)  # an old-style plugin: a non-enum name is a user type
"""

BOTH_EMBEDDINGS = """
  layer { name: "emb_builtin" type: kEmbedding srclayers: "data"
          embedding_conf { vocab_size: 10 feature_dim: 3 }
          param { name: "vocab" init { type: kUniform low: -1 high: 1 } } }
  layer { name: "emb_user" user_type: "kEmbedding" srclayers: "data" }
  layer { name: "old_style" user_type: "kDoubler" srclayers: "data" }
"""


def test_user_type_and_enum_type_of_one_name_live_side_by_side(site, tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    from singa_core.jobconf.parse import parse_job_text
    from singa_core.layer import kTrain
    from singa_core.plugin_host.registry import UserTypeName
    from singa_core.running.job import prepare_job

    fake_dist(site, "singa-user-embedding", "singa_user_embedding", USER_EMBEDDING_PLUGIN)
    host = PluginHost()
    host.load_entry_points()
    assert not host.conflicts()
    builtin = host.get("layer", "kEmbedding")
    user = host.get("layer", UserTypeName("kEmbedding"))
    assert builtin.__module__ == "singa_builtins.layers.embedding"
    assert user.__name__ == "Doubler" and host.get("layer", UserTypeName("kDoubler")) is user
    # a user_type naming only a built-in still resolves to it (as before)
    assert host.get("layer", UserTypeName("kSTanh")) is host.get("layer", "kSTanh")

    data = write_csv_blobs(tmp_path / "blobs.csv", dim=1)  # one index-like value per row
    text = mlp_conf(data, tmp_path / "ws", dim=1, extra=BOTH_EMBEDDINGS)
    prepared = prepare_job(parse_job_text(text, "job.conf"), host, seed=1)
    net = prepared.nets[kTrain]
    assert type(net.by_name["emb_builtin"]) is builtin
    assert net.by_name["emb_builtin"].shape == (20, 3)
    assert type(net.by_name["emb_user"]) is user and type(net.by_name["old_style"]) is user
    assert net.by_name["emb_user"].shape == (20, 1)


def test_a_job_using_the_user_type_trains_and_list_plugins_shows_namespaces(site, tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    fake_dist(site, "singa-user-embedding", "singa_user_embedding2", USER_EMBEDDING_PLUGIN)
    data = write_csv_blobs(tmp_path / "blobs.csv")
    text = mlp_conf(data, tmp_path / "ws", steps=5).replace(
        'layer {{ name: "tanh" type: kSTanh srclayers: "ip1" }}'.replace("{{", "{").replace(
            "}}", "}"
        ),
        'layer { name: "tanh" type: kSTanh srclayers: "ip1" }\n'
        '  layer { name: "twice" user_type: "kEmbedding" srclayers: "tanh" }',
    )
    text = text.replace('srclayers: "tanh"\n', 'srclayers: "twice"\n')
    assert 'srclayers: "twice"' in text and 'user_type: "kEmbedding"' in text
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    env = {"PYTHONPATH": str(site)}
    res = run_singa("train", str(conf), "--seed", "3", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "more than one plugin" not in res.stderr

    res = run_singa("list-plugins", env=env)
    rows = [ln.split() for ln in res.stdout.splitlines()]
    assert ["singa-user-embedding", "0.1", "user_type", "layer", "kDoubler,", "kEmbedding"] in rows
    builtin_row = next(r for r in rows if r[:2] == ["singa-classic", "0.1.0"])
    assert builtin_row[2:4] == ["type", "layer"] and "kEmbedding," in builtin_row
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["singa-user-embedding"]["types_by_field"] == {
        "layer": {"user_type": ["kDoubler", "kEmbedding"]}
    }
    assert "kEmbedding" in by_name["singa-classic"]["types_by_field"]["layer"]["type"]
    assert data["conflicts"] == []


def test_list_plugins_shows_every_provider_of_a_conflict(site):
    fake_dist(site, "singa-twin-a", "singa_twin_a4", LAYER_PLUGIN)
    fake_dist(site, "singa-twin-b", "singa_twin_b4", LAYER_PLUGIN)
    env = {"PYTHONPATH": str(site)}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines()]
    for dist in ("singa-twin-a", "singa-twin-b"):
        assert [dist, "0.1", "user_type", "layer", "kTwin", "(conflict)"] in rows, res.stdout
    assert (
        "conflict: layer user_type kTwin is provided by singa-twin-a 0.1 and singa-twin-b 0.1"
        in res.stderr
    )
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    by_name = {p["name"]: p for p in data["plugins"]}
    for dist in ("singa-twin-a", "singa-twin-b"):
        assert by_name[dist]["types"] == {"layer": ["kTwin (conflict)"]}
    assert data["conflicts"] == [
        {
            "kind": "layer",
            "name": "kTwin",
            "field": "user_type",
            "providers": ["singa-twin-a 0.1", "singa-twin-b 0.1"],
        }
    ]


def test_conflict_error_points_at_the_layer_that_names_the_type(site, tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    fake_dist(site, "singa-twin-a", "singa_twin_a5", LAYER_PLUGIN)
    fake_dist(site, "singa-twin-b", "singa_twin_b5", LAYER_PLUGIN)
    data = write_csv_blobs(tmp_path / "blobs.csv")
    twin = 'layer { name: "twin" user_type: "kTwin" srclayers: "tanh" }'
    text = mlp_conf(data, tmp_path / "ws", steps=2, extra=twin)
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    env = {"PYTHONPATH": str(site)}
    res = run_singa("train", str(conf), env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    line_no, line = next((i, ln) for i, ln in enumerate(text.splitlines(), 1) if twin in ln)
    col = line.index('user_type: "kTwin"') + 1
    message = 'layer user_type "kTwin" is provided by more than one plugin'
    assert f"{conf}:{line_no}:{col}: error: {message}" in res.stderr, res.stderr
    assert "singa-twin-a 0.1" in res.stderr and "singa-twin-b 0.1" in res.stderr
    assert "help:" in res.stderr
    # the conflict does not concern jobs that do not use the name
    conf.write_text(text.replace(twin, ""))
    res = run_singa("train", str(conf), env=env)
    assert res.returncode == 0, res.stderr


def test_registry_namespaces_unit():
    from singa_core.layer import NeuronLayer
    from singa_core.plugin_host.registry import Provider, UserTypeName, make_registries

    class A(NeuronLayer):
        pass

    class B(NeuronLayer):
        pass

    reg = make_registries()["layer"]
    one, two = Provider("one", "dist-one", "1"), Provider("two", "dist-two", "2")
    reg.add("kEmbedding", A, one)  # an enum name: the enum namespace
    reg.add("kEmbedding", B, two, user_type=True)  # the same string as a user type
    reg.add("kFoo", B, two)  # not an enum name: a user type
    assert reg.get("kEmbedding") is A and reg.get(UserTypeName("kEmbedding")) is B
    assert reg.get(UserTypeName("kFoo")) is B and reg.get("kFoo") is B  # plain str: then user
    assert not reg.conflicts
    with pytest.raises(TypeError, match="not a LayerType value"):
        reg.add("kBar", A, one, user_type=False)
    reg.add("kFoo", A, one)  # a second provider of user type kFoo
    assert reg.conflict_for(UserTypeName("kFoo"))[0] == "user"
    assert reg.conflict_for("kEmbedding") is None and reg.entry(UserTypeName("kFoo")) is None
    with pytest.raises(SingaError, match='layer user_type "kFoo" is provided by more than one'):
        reg.get(UserTypeName("kFoo"))
    listed = [(e.name, e.namespace, e.provider.dist) for e in reg.all_entries()]
    assert listed == [
        ("kEmbedding", "enum", "dist-one"),
        ("kEmbedding", "user", "dist-two"),
        ("kFoo", "user", "dist-one"),
        ("kFoo", "user", "dist-two"),
    ]
