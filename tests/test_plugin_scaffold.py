"""`singa new-plugin`: one package of each kind is scaffolded, pip-installed for real (all
eight in one install), its generated tests pass, `singa list-plugins` shows it, and the
example job.conf it ships trains on MNIST with it. A layer package whose backward is broken
fails its own generated tests (the kit's gradient check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_singa
from plugin_package import pip_install_into
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.scaffold import EXTENSION_RANGES, KINDS, field_number, names

pytestmark = pytest.mark.slow

NAMES = {kind: f"ci-{kind}" for kind in KINDS}


def env_with(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(site), "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """{kind: package folder} of eight scaffolded packages, and the pip --target folder
    they are installed into."""
    root = tmp_path_factory.mktemp("scaffold")
    made = {}
    for kind, name in NAMES.items():  # the real command, in this process
        res = CliRunner().invoke(app, ["new-plugin", name, "--kind", kind, "--out", str(root)])
        assert res.exit_code == 0, res.output
        made[kind] = root / f"singa-{name}"
        assert f"wrote {made[kind] / 'pyproject.toml'}" in res.output
    # as a plugin author does after editing the .proto (README): compile it again
    for kind, folder in made.items():
        v = names(NAMES[kind])
        for proto in (folder / v["package"]).glob("*.proto"):
            generated = proto.with_name(proto.stem + "_pb2.py")
            generated.unlink()
            res = CliRunner().invoke(
                app, ["compile-proto", str(proto), "--out", str(folder), "-I", str(folder)]
            )
            assert res.exit_code == 0 and generated.is_file(), res.output
    site = root / "site"
    pip_install_into(site, *made.values())
    return made, site


def test_packages_have_what_a_publisher_needs(scaffolded):
    made, _ = scaffolded
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
            assert (folder / v["package"] / f"{v['ident']}_pb2.py").is_file()


def test_generated_tests_pass(scaffolded):
    made, site = scaffolded
    tests = [str(folder / "tests") for folder in made.values()]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=site.parent,
        env={**os.environ, **env_with(site)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "failed" not in res.stdout


def test_list_plugins_shows_every_package(scaffolded):
    _, site = scaffolded
    res = run_singa("list-plugins", "--json", env=env_with(site))
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


@pytest.mark.parametrize("kind", list(KINDS))
def test_example_job_trains_on_mnist(kind, scaffolded, mnist_stores, tmp_path):
    made, site = scaffolded
    folder = made[kind]
    v = names(NAMES[kind])
    env = env_with(site)
    train, test = mnist_stores / "train_data.bin", mnist_stores / "test_data.bin"
    args = []
    if kind == "store":  # the plugin's own tool copies MNIST into its format
        for split in ("train_data", "test_data"):
            shutil.copy(mnist_stores / f"{split}.bin", tmp_path / f"{split}.bin")
        res = subprocess.run(
            [sys.executable, "-m", f"{v['package']}.copy_store", str(tmp_path), "3000"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        train, test = (tmp_path / f"{s}.{v['ident']}" for s in ("train_data", "test_data"))
    elif kind == "dataset":  # `singa data NAME` converts MNIST written as CSV
        _mnist_csv(mnist_stores, tmp_path / "csv", 3000, 500)
        res = run_singa(
            "data",
            v["ident"],
            "--from",
            str(tmp_path / "csv"),
            "--out",
            str(tmp_path / "data"),
            env=env,
        )
        assert res.returncode == 0, res.stderr
        train, test = tmp_path / "data" / "train_data.bin", tmp_path / "data" / "test_data.bin"
    elif kind == "engine":
        args = ["--engine", v["ident"]]
    ws = tmp_path / "ws"
    res = run_singa(
        "train",
        str(folder / "example" / "job.conf"),
        *args,
        "--workspace",
        str(ws),
        "-o",
        "train_steps=100",
        "-o",
        "test_after=80",
        "-o",
        "test_freq=80",
        "-o",
        "test_steps=5",
        "-o",
        f"neuralnet.layer[0].store_conf.path={train}",
        "-o",
        f"neuralnet.layer[1].store_conf.path={test}",
        "--seed",
        "1",
        env=env,
        cwd=folder,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"singa-{NAMES[kind]}-0.1.0" in res.stderr  # the plugin is among those loaded
    records = [json.loads(line) for line in (ws / "metrics.jsonl").read_text().splitlines()]
    tested = [r for r in records if r.get("phase") == "test"]
    assert tested and tested[-1]["step"] == 80
    print(f"{kind}: MNIST test accuracy after 80 steps = {tested[-1]['accuracy']:.3f}")
    assert tested[-1]["accuracy"] > 0.75, tested


def test_broken_backward_fails_the_generated_tests(scaffolded, tmp_path):
    """The layer template's d(loss)/dx made 2% too large on the positive side: the
    generated test suite (the kit's gradient check) must fail."""
    made, _ = scaffolded
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
