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

    reg = make_registries("dist-one")["layer"]  # dist-one is the core (the built-ins)
    one, two = Provider("one", "dist-one", "1"), Provider("two", "dist-two", "2")
    reg.add("kEmbedding", A, one)  # the core's enum name: the enum namespace
    reg.add("kEmbedding", B, two)  # another distribution's string: a user type (0.3)
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


# -- 0.3-style registrations: a third party's string "kEmbedding" is a user type ----------
RNNLM_STYLE_PLUGIN = USER_EMBEDDING_PLUGIN.replace(
    'register("kEmbedding", Doubler, user_type=True)', 'register("kEmbedding", Doubler)'
)
assert 'register("kEmbedding", Doubler)' in RNNLM_STYLE_PLUGIN

BOTH_IN_ONE_NET = """
  layer { name: "idx" type: kArgSort srclayers: "data" argsort_conf { topk: 1 } }
  layer { name: "emb" type: kEmbedding srclayers: "idx"
          embedding_conf { vocab_size: 4 feature_dim: 4 }
          param { name: "vocab" init { type: kUniform low: -0.1 high: 0.1 } } }
"""


def _job_with_both_embeddings(tmp_path):
    """The small MLP with a user_type "kEmbedding" after tanh and a built-in kEmbedding of
    each input's largest feature (kArgSort) concatenated to it (both on the loss's path)."""
    from conftest import mlp_conf, write_csv_blobs

    data = write_csv_blobs(tmp_path / "blobs.csv")
    text = mlp_conf(data, tmp_path / "ws", steps=30, extra=BOTH_IN_ONE_NET)
    tanh = 'layer { name: "tanh" type: kSTanh srclayers: "ip1" }'
    assert tanh in text and 'srclayers: "tanh"\n' in text
    text = text.replace('srclayers: "tanh"\n', 'srclayers: "both"\n').replace(
        tanh,
        tanh + '\n  layer { name: "twice" user_type: "kEmbedding" srclayers: "tanh" }\n'
        '  layer { name: "both" type: kConcate srclayers: "twice" srclayers: "emb"\n'
        "          concate_conf { concate_dim: 1 num_concates: 2 } }",
    )
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    return conf


def test_third_party_string_registration_of_an_enum_name_serves_user_type(site, tmp_path):
    """0.3's rnnlm registered its layers by string (`register("kEmbedding", ...)`, the
    string factory): such a registration from a plugin distribution serves
    `user_type: "kEmbedding"` and leaves `type: kEmbedding` to the built-in, no clash."""
    from singa_core.plugin_host.registry import USER, UserTypeName

    fake_dist(site, "singa-rnnlm-style", "singa_rnnlm_style", RNNLM_STYLE_PLUGIN)
    host = PluginHost()
    host.load_entry_points()
    assert host.conflicts() == []
    user = host.get("layer", UserTypeName("kEmbedding"))
    assert user.__name__ == "Doubler"
    assert host.get("layer", "kEmbedding").__module__ == "singa_builtins.layers.embedding"
    ours = [e for e in host.registry("layer").all_entries() if e.provider.dist != "singa-classic"]
    assert {(e.name, e.namespace) for e in ours} == {("kEmbedding", USER), ("kDoubler", USER)}

    conf = _job_with_both_embeddings(tmp_path)
    res = run_singa("train", str(conf), "--seed", "2", env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "more than one plugin" not in res.stderr
    lines = (tmp_path / "ws" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(ln) for ln in lines]
    train = [r for r in records if r.get("phase") == "train"]
    assert train[-1]["loss"] < train[0]["loss"]


def test_a_third_party_may_still_take_the_enum_name_on_purpose(site):
    """`user_type=False` puts a plugin's name among the enum types: then it does clash with
    the built-in, and the help line names the choice."""
    fake_dist(
        site,
        "singa-enum-taker",
        "singa_enum_taker",
        RNNLM_STYLE_PLUGIN.replace(
            'register("kEmbedding", Doubler)', 'register("kEmbedding", Doubler, user_type=False)'
        ),
    )
    host = PluginHost()
    host.load_entry_points()
    assert [c[:3] for c in host.conflicts()] == [("layer", "enum", "kEmbedding")]
    with pytest.raises(SingaError) as err:
        host.get("layer", "kEmbedding")
    assert 'layer type "kEmbedding" is provided by more than one plugin' in str(err.value)
    help_ = err.value.help
    assert 'register("kEmbedding", cls, user_type=True) is selected by user_type: "kEmbedding"' in (
        help_
    )
    assert "user_type=False by type: kEmbedding" in help_
    assert "SINGA_DISABLE_PLUGINS=layers or SINGA_DISABLE_PLUGINS=singa_enum_taker" in help_


def test_two_plugins_claiming_one_user_type_get_the_clash_and_its_help(site, tmp_path):
    fake_dist(site, "singa-rnnlm-a", "singa_rnnlm_a", RNNLM_STYLE_PLUGIN)
    fake_dist(site, "singa-rnnlm-b", "singa_rnnlm_b", RNNLM_STYLE_PLUGIN)
    conf = _job_with_both_embeddings(tmp_path)
    res = run_singa("train", str(conf), env={"PYTHONPATH": str(site)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert 'error: layer user_type "kEmbedding" is provided by more than one plugin' in res.stderr
    assert "singa-rnnlm-a 0.1 (plugin 'singa_rnnlm_a')" in res.stderr
    assert "singa-rnnlm-b 0.1 (plugin 'singa_rnnlm_b')" in res.stderr
    help_line = next(ln for ln in res.stderr.splitlines() if ln.lstrip().startswith("help:"))
    assert 'register("kEmbedding", cls, user_type=True) is selected by user_type: ' in help_line
    assert "user_type=False by type: kEmbedding" in help_line
    assert "SINGA_DISABLE_PLUGINS=singa_rnnlm_a or SINGA_DISABLE_PLUGINS=singa_rnnlm_b" in help_line
    assert "singa-classic" not in res.stderr.split("error:", 1)[1].split("help:")[0]


def test_a_missing_pb2_module_says_how_to_produce_it(site, tmp_path):
    """A plugin whose generated module is missing fails to load; the warning and the error
    of a job that names its type say to run `singa compile-proto` (protoc needed only
    after editing the .proto), not to pip install something."""
    from conftest import mlp_conf, write_csv_blobs

    pkg = site / "singa_nopb"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nopb.proto").write_text('syntax = "proto2";\npackage singa_nopb;\n')
    (pkg / "plugin.py").write_text(
        "from singa_nopb import nopb_pb2\n" + LAYER_PLUGIN.replace("kTwin", "kNoPb")
    )
    info = site / "singa_nopb-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: singa-nopb\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[singa]\nnopb = singa_nopb.plugin\n")
    env = {"PYTHONPATH": str(site)}
    data = write_csv_blobs(tmp_path / "blobs.csv")
    layer = 'layer { name: "nopb" user_type: "kNoPb" srclayers: "tanh" }'
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws", steps=2, extra=layer))
    res = run_singa("train", str(conf), env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert 'unknown layer type "kNoPb"' in res.stderr
    help_line = next(ln for ln in res.stderr.splitlines() if ln.lstrip().startswith("help:"))
    assert "singa compile-proto singa_nopb/nopb.proto --out . -I ." in help_line, help_line
    assert "singa-classic[proto]" in help_line and "only needed after editing" in help_line
    assert "pip install ...)" not in help_line
    listed = run_singa("list-plugins", env=env)
    assert "singa compile-proto singa_nopb/nopb.proto" in listed.stderr, listed.stderr
