"""`singa new-plugin`: one package of each kind is scaffolded in a plain virtualenv (only
`pip install singa-classic`: no protoc), installed with the pip command it printed (all eight
in one install), its generated tests pass, `singa list-plugins` shows it, and the example
job.conf it ships trains on MNIST with it. The generated `_pb2` modules describe the same
files as protoc's output for the `.proto` beside them. A layer package whose backward is
broken fails its own generated tests (the kit's gradient check)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_singa
from plugin_package import PlainVenv, pip_install_into, plain_venv
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.scaffold import EXTENSION_RANGES, KINDS, field_number, names

NAMES = {kind: f"ci-{kind}" for kind in KINDS}


def env_with(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(site), "OPENBLAS_NUM_THREADS": "1"}


@dataclass
class Scaffolded:
    root: Path  # where `singa new-plugin` ran
    venv: PlainVenv
    made: dict[str, Path]  # kind -> package folder
    steps: dict[str, list[str]]  # kind -> the "next:" commands it printed


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """Eight packages written by the plain venv's `singa new-plugin` and installed there
    with the command each printed."""
    root = tmp_path_factory.mktemp("scaffold")
    venv = plain_venv(root.parent / f"{root.name}-venv")
    made, steps = {}, {}
    for kind, name in NAMES.items():
        res = venv.run("singa", "new-plugin", name, "--kind", kind, cwd=root)
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stderr == "", res.stderr  # no "not compiled" note: nothing needs protoc
        made[kind] = root / f"singa-{name}"
        assert f"wrote {made[kind].relative_to(root) / 'pyproject.toml'}" in res.stdout
        steps[kind] = [ln.strip() for ln in res.stdout.split("next:\n", 1)[1].splitlines()]
        assert steps[kind][0] == f"pip install ./singa-{name}", steps[kind]
    # the printed commands verbatim (offline: --no-index --no-build-isolation), in one pip
    folders = [arg for kind in made for arg in shlex.split(steps[kind][0])[2:]]
    pip = venv.pip_install(*folders, cwd=root)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert "Requirement already satisfied: singa-classic" in pip.stdout  # never fetched
    return Scaffolded(root, venv, made, steps)


@pytest.mark.slow
def test_packages_have_what_a_publisher_needs(scaffolded):
    made = scaffolded.made
    for kind, folder in made.items():
        v = names(NAMES[kind])
        pyproject = (folder / "pyproject.toml").read_text()
        assert 'dependencies = ["singa-classic>=0.1,<1"]' in pyproject
        assert f'{v["ident"]} = "{v["package"]}.plugin"' in pyproject
        plugin = (folder / v["package"] / "plugin.py").read_text()
        assert 'SINGA_PLUGIN_API = ">=1,<2"' in plugin
        assert (folder / "README.md").is_file() and (folder / "example" / "job.conf").is_file()
        assert (folder / "tests" / f"test_{v['ident']}.py").is_file()
        proto = folder / v["package"] / f"{v['ident']}.proto"
        extends = KINDS[kind].extends
        assert proto.is_file() == (extends is not None)
        if extends:
            number = field_number(v["package"], extends)
            lo, hi = EXTENSION_RANGES[extends]
            assert lo <= number <= hi
            assert f"{v['ext']} = {number};" in proto.read_text()
            generated = (folder / v["package"] / f"{v['ident']}_pb2.py").read_text()
            assert "without protoc" in generated and "singa compile-proto" in generated


@pytest.mark.slow
def test_generated_tests_pass(scaffolded):
    """The printed `pytest singa-NAME/tests` of all eight, in the plain venv (pytest is
    there as the `[test]` extra would bring it)."""
    tests = []
    for kind, folder in scaffolded.made.items():
        install_extra, run_tests = scaffolded.steps[kind][2].split(" && ")
        assert install_extra == f"pip install './{folder.name}[test]'"
        assert run_tests == f"pytest {folder.name}/tests"
        tests.append(shlex.split(run_tests)[1])
    res = scaffolded.venv.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, cwd=scaffolded.root
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "failed" not in res.stdout


@pytest.mark.slow
def test_list_plugins_shows_every_package(scaffolded):
    res = scaffolded.venv.run("singa", "list-plugins", "--json")
    assert res.returncode == 0, res.stderr
    listed = {p["name"]: p["types"] for p in json.loads(res.stdout)["plugins"]}
    registry_kind = {
        "layer": "layer",
        "worker": "worker",
        "updater": "updater",
        "lr": "lr_change",
        "paramgen": "param_generator",
        "engine": "engine",
        "store": "store",
        "dataset": "dataset",
    }
    for kind, name in NAMES.items():
        v = names(name)
        types = listed[v["project"]]
        expected = v["ident"] if kind in ("engine", "store", "dataset") else v["Type"]
        shown = json.dumps(types[registry_kind[kind]])
        assert expected in shown, (kind, types)
    assert "singa-ci-layer" not in run_singa("list-plugins", "--json").stdout  # venv only


def _mnist_csv(stores: Path, out: Path, n_train: int, n_test: int) -> None:
    """MNIST records as 'label,pixel,...' lines (the dataset plugin's input format)."""
    import numpy as np

    from singa_core.plugin_host.host import get_host
    from singa_core.schema import common_pb2
    from singa_core.store import KREAD

    out.mkdir(parents=True, exist_ok=True)
    for split, csv, n in (("train_data", "train.csv", n_train), ("test_data", "test.csv", n_test)):
        store = get_host().get("store", "kvfile")()
        store.open(str(stores / f"{split}.bin"), KREAD)
        rows = []
        for _ in range(n):
            rec = common_pb2.RecordProto.FromString(store.read()[1])
            pixels = np.frombuffer(rec.pixel, np.uint8)
            rows.append(f"{rec.label}," + ",".join(map(str, pixels.tolist())))
        store.close()
        (out / csv).write_text("\n".join(rows) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_example_job_trains_on_mnist(kind, scaffolded, mnist_stores, tmp_path):
    """The printed `cd singa-NAME && PREPARE && singa train example/job.conf ...` in the
    plain venv; the stores are the session's MNIST (or the plugin's conversion of it), the
    run shortened with -o."""
    folder, venv = scaffolded.made[kind], scaffolded.venv
    v = names(NAMES[kind])
    cd, *prepare, train_cmd = scaffolded.steps[kind][3].split(" && ")
    assert cd == f"cd ./{folder.name}" and train_cmd.startswith("singa train example/job.conf")
    train, test = mnist_stores / "train_data.bin", mnist_stores / "test_data.bin"
    if kind == "store":  # the plugin's own tool copies MNIST into its format
        assert prepare[-1] == f"python -m {v['package']}.copy_store mnist"
        for split in ("train_data", "test_data"):
            shutil.copy(mnist_stores / f"{split}.bin", tmp_path / f"{split}.bin")
        res = venv.run("python", "-m", f"{v['package']}.copy_store", str(tmp_path), "3000")
        assert res.returncode == 0, res.stderr
        train, test = (tmp_path / f"{s}.{v['ident']}" for s in ("train_data", "test_data"))
    elif kind == "dataset":  # `singa data NAME` converts MNIST written as CSV
        _mnist_csv(mnist_stores, tmp_path / "csv", 3000, 500)
        res = venv.run(
            "singa", "data", v["ident"], "--from", str(tmp_path / "csv"), "--out",
            str(tmp_path / "data"),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        train, test = tmp_path / "data" / "train_data.bin", tmp_path / "data" / "test_data.bin"
    ws = tmp_path / "ws"
    res = venv.run(
        *shlex.split(train_cmd),
        "--workspace", str(ws),
        "-o", "train_steps=100", "-o", "test_after=80", "-o", "test_freq=80",
        "-o", "test_steps=5",
        "-o", f"neuralnet.layer[0].store_conf.path={train}",
        "-o", f"neuralnet.layer[1].store_conf.path={test}",
        "--seed", "1",
        cwd=folder,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"singa-{NAMES[kind]}-0.1.0" in res.stderr  # the plugin is among those loaded
    records = [json.loads(line) for line in (ws / "metrics.jsonl").read_text().splitlines()]
    tested = [r for r in records if r.get("phase") == "test"]
    # tested at step 80 (test_freq) and at the last step (singa train ends with an answer)
    assert [r["step"] for r in tested] == [80, 100], tested
    print(f"{kind}: MNIST test accuracy after 100 steps = {tested[-1]['accuracy']:.3f}")
    assert tested[-1]["accuracy"] > 0.75, tested


@pytest.mark.slow
def test_broken_backward_fails_the_generated_tests(scaffolded, tmp_path):
    """The layer template's d(loss)/dx made 2% too large on the positive side: the
    generated test suite (the kit's gradient check) must fail."""
    made = scaffolded.made
    v = names(NAMES["layer"])
    broken = tmp_path / "broken"
    shutil.copytree(made["layer"], broken, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    plugin = broken / v["package"] / "plugin.py"
    text = plugin.read_text()
    good = "np.where(negative, a, 1)"
    assert text.count(good) == 1
    plugin.write_text(text.replace(good, "np.where(negative, a, 1.02)"))
    site = tmp_path / "site"
    pip_install_into(site, broken)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            str(broken / "tests"),
            "-k",
            "contract_per_feature",
        ],
        cwd=tmp_path,
        env={**os.environ, **env_with(site)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout[-3000:]
    assert "gradient checks of 'act' failed" in res.stdout
    assert "src 0" in res.stdout  # the mismatches are on the source's gradient


# -- the _pb2 modules new-plugin writes without protoc ---------------------------------------
PROTO_KINDS = [kind for kind, spec in KINDS.items() if spec.extends]


def _descriptor_in(module_file: Path):
    """The FileDescriptorProto a generated module adds to the pool (read, not imported)."""
    from google.protobuf import descriptor_pb2

    from singa_core.plugin_host.host import _serialized_descriptors

    (blob,) = _serialized_descriptors(module_file.read_text())
    return descriptor_pb2.FileDescriptorProto.FromString(blob)


@pytest.mark.parametrize("kind", PROTO_KINDS)
def test_generated_module_describes_what_protoc_compiles(kind, tmp_path):
    """The module written without protoc and protoc's output for the .proto beside it
    describe the same file; after an edit of the .proto, `singa compile-proto` (the
    `[proto]` extra) regenerates the module from it."""
    pytest.importorskip("grpc_tools", reason="compiling needs singa-classic[proto]")
    from singa_core.schema import compile_plugin_protos

    res = CliRunner().invoke(
        app, ["new-plugin", f"pb-{kind}", "--kind", kind, "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    v = names(f"pb-{kind}")
    folder = tmp_path / v["project"]
    proto = folder / v["package"] / f"{v['ident']}.proto"
    ours = _descriptor_in(proto.with_name(f"{v['ident']}_pb2.py"))
    compiled = tmp_path / "protoc"
    compile_plugin_protos([str(proto)], str(compiled), [str(folder)])
    theirs = _descriptor_in(compiled / v["package"] / f"{v['ident']}_pb2.py")
    assert ours == theirs, f"{ours}\n!=\n{theirs}"
    assert ours.extension[0].number == field_number(v["package"], KINDS[kind].extends)

    # the module works: a job.conf block of the extension parses with its defaults
    script = (
        "from google.protobuf import text_format\n"
        f"from singa_core.schema import job_pb2\nfrom {v['package']} import {v['ident']}_pb2 as m\n"
        f"msg = job_pb2.{KINDS[kind].extends.split('.')[1]}()\n"
        f"text_format.Parse('[{v['package']}.{v['ext']}] {{ }}', msg)\n"
        f"print(msg.Extensions[m.{v['ext']}].ListFields() == [], m.{v['message']}().ByteSize())"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0 and ran.stdout.split() == ["True", "0"], ran.stderr

    # an author edits the .proto (another field number) and compiles it with protoc
    text = proto.read_text()
    old_number = f"{v['ext']} = {ours.extension[0].number};"
    lo, _ = EXTENSION_RANGES[KINDS[kind].extends]
    new_number = lo if ours.extension[0].number != lo else lo + 1
    proto.write_text(text.replace(old_number, f"{v['ext']} = {new_number};"))
    res = CliRunner().invoke(
        app, ["compile-proto", str(proto), "--out", str(folder), "-I", str(folder)]
    )
    assert res.exit_code == 0, res.output
    edited = _descriptor_in(proto.with_name(f"{v['ident']}_pb2.py"))
    assert edited.extension[0].number == new_number


def test_missing_protoc_error_says_it_is_only_for_edited_protos(tmp_path, monkeypatch):
    """Without grpcio-tools, compile-proto's error says what to install and that a package
    from `singa new-plugin` does not need it until its .proto is edited."""
    import builtins

    real_import = builtins.__import__

    def no_grpc_tools(name, *args, **kwargs):
        if name.startswith("grpc_tools"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    proto = tmp_path / "foo.proto"
    proto.write_text('syntax = "proto2";\npackage foo;\n')
    monkeypatch.setattr(builtins, "__import__", no_grpc_tools)
    res = CliRunner().invoke(app, ["compile-proto", str(proto), "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "pip install 'singa-classic[proto]'" in res.output
    assert "only after editing its .proto" in res.output
