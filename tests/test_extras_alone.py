"""Every optional extra, installed alone into a fresh virtualenv, runs its feature end to end;
and there, every feature of another extra is refused with exit 2 naming that extra.

The venv holds singa-classic built from the checkout and exactly what ``pip install
'singa-classic[EXTRA]'`` would bring: the extra's requirements and everything they require
in turn, linked from this environment (tests/plugin_package.py: the tests never use the
network). So a module an extra needs but does not declare is missing there, as on a user's
clean install (the ``ray`` extra without ``grpcio`` failed every Ray run this way).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from plugin_package import PlainVenv, _closure, linked_venv

from singa_core.testing import blobs_csv, mlp_job
from tests.conftest import REPO

# with pytest -n, on one worker (a file at a time: tests/conftest.py):
# one wheel built for all of them
pytestmark = pytest.mark.slow

EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
FEATURES = sorted(e for e in EXTRAS if e != "test")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """singa-classic's wheel, built once from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("singa_core", "plugins", "proto"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    out = root / "dist"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return next(out.glob("singa_classic-*.whl"))


def venv_with(extra: str, wheel: Path, root: Path) -> PlainVenv:
    """A venv with singa-classic[extra] and exactly what that extra brings."""
    venv = linked_venv(root, list(EXTRAS[extra]))
    res = venv.pip_install(f"{wheel}[{extra}]")
    assert res.returncode == 0, res.stdout + res.stderr
    return venv


def _small_job(tmp: Path, steps: int = 6) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    data = blobs_csv(tmp / "blobs.csv")
    conf = tmp / "job.conf"
    text = mlp_job(data, steps=steps).replace(
        f"train_steps: {steps}", f"train_steps: {steps}\ncheckpoint_freq: {steps}"
    )
    conf.write_text(text)
    return conf


def _image_folder(tmp: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    root = tmp / "images"
    for k, name in enumerate(("cats", "dogs")):
        (root / name).mkdir(parents=True)
        for i in range(12):
            pixels = (rng.random((32, 32, 3)) * 120 + 100 * k).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def _ok(res, what: str) -> None:
    assert res.returncode == 0, f"{what}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr, f"{what}:\n{res.stderr}"


def _train(venv, conf, ws, *args):
    res = venv.run("singa", "train", str(conf), "--workspace", str(ws), "-q", *args)
    _ok(res, "train")
    return res


# -- each extra's own feature ---------------------------------------------------------------------
def feature(extra: str, venv: PlainVenv, tmp: Path) -> None:
    conf = _small_job(tmp)
    ws = tmp / "ws"
    if extra == "ray":  # the private runtime and a token-checking head at an address
        from tests.engines.test_ray_engine import run_in_private_network

        res = run_in_private_network(
            f"exec {sys.executable} -m pytest -q -p no:cacheprovider "
            "tests/engines/ray_extra_checks.py",
            timeout=600,
            SINGA_EXTRA_VENV=str(venv.root),
        )
        assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout[-4000:]
    elif extra == "images":
        out = tmp / "stores"
        res = venv.run("singa", "data", "images", str(_image_folder(tmp)), "--out", str(out))
        _ok(res, "singa data images")
        _train(venv, out / "job.conf", ws, "-o", "train_steps=4", "-o", "test_steps=1")
    elif extra == "lmdb":  # LMDB stores (written here, where Pillow is) trained on there
        from tests.conftest import run_singa

        out = tmp / "stores"
        res = run_singa("data", "images", str(_image_folder(tmp)), "--out", str(out),
                        "--backend", "lmdb")  # fmt: skip
        _ok(res, "singa data images --backend lmdb")
        _train(venv, out / "job.conf", ws, "-o", "train_steps=4", "-o", "test_steps=1")
    elif extra in ("onnx", "export"):
        _train(venv, conf, ws)
        fmt, suffix = ("onnx", "onnx") if extra == "onnx" else ("safetensors", "safetensors")
        out = tmp / f"model.{suffix}"
        res = venv.run("singa", "export", str(conf), "--workspace", str(ws), "--format", fmt,
                       "--out", str(out))  # fmt: skip
        _ok(res, f"export {fmt}")
        assert out.stat().st_size > 1000
    elif extra == "tensorboard":
        _train(venv, conf, ws)
        events = list((ws / "tensorboard").rglob("events.out.tfevents.*"))
        assert events and events[0].stat().st_size > 0
    elif extra == "plot":
        _train(venv, conf, ws)
        res = venv.run("singa", "plot", str(ws), "--out", str(tmp / "p.png"))
        _ok(res, "plot")
        assert (tmp / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    elif extra == "fast":
        res = venv.run("python", "-c", "from singa_builtins.layers._pool_kernels import kernels; "
                       "assert kernels() is not None, 'numba kernels not compiled'; "
                       "from singa_builtins.layers._gru_sequence import compiled; "
                       "assert compiled() is not None, 'GRU step passes not compiled'")  # fmt: skip
        _ok(res, "numba kernels")
    elif extra == "mkl":  # the MLP trained with MKL's SGEMM, said in the run's notes
        res = venv.run("python", "-c", "from singa_core.contracts import sgemm; "
                       "lib = sgemm.library('mkl'); assert lib is not None, 'no MKL'; "
                       "print(lib.version)")  # fmt: skip
        _ok(res, "MKL found")
        res = venv.run("singa", "train", str(conf), "--workspace", str(ws),
                       env={"SINGA_SGEMM": "mkl"})  # fmt: skip
        _ok(res, "train with SINGA_SGEMM=mkl")
        assert "sgemm: mkl" in res.stderr, res.stderr
    elif extra == "proto":
        proto = tmp / "ext.proto"
        proto.write_text(
            'syntax = "proto2";\nimport "singa_core/schema/job.proto";\npackage extpkg;\n'
            "message ExtConf { optional int32 k = 1; }\n"
            "extend singa.LayerProto { optional ExtConf ext_conf = 1050; }\n"
        )
        res = venv.run("singa", "compile-proto", str(proto), "--out", str(tmp))
        _ok(res, "compile-proto")
        assert (tmp / "ext_pb2.py").is_file()
    elif extra == "tune":  # a study of 2 trials; --show reads its store
        space = tmp / "space.conf"
        space.write_text(
            'param { field: "updater.momentum" uniform { low: 0 high: 0.9 } }\n'
            'objective { metric: "loss" }\nbudget { trials: 2 }\n'
        )
        res = venv.run("singa", "tune", str(conf), str(space), "--study", str(tmp / "study"),
                       "-o", "test_steps=2")  # fmt: skip
        _ok(res, "tune")
        res = venv.run("singa", "tune", "--show", str(tmp / "study"), "--json")
        _ok(res, "tune --show")
        assert len(json.loads(res.stdout)["trials"]) == 2
    elif extra == "gpu":
        res = venv.run("singa", "train", str(conf), "--workspace", str(ws), "--device", "cuda")
        if res.returncode == 2 and "no CUDA device" in res.stderr:
            pytest.skip("CuPy installed, but this machine has no CUDA device")
        _ok(res, "train --device cuda")
    else:
        raise AssertionError(f"no end-to-end check for the extra {extra!r}: add one here")


# -- what another extra's feature says where that extra is missing ---------------------------------
def refusals(tmp: Path, conf: Path, ws: Path) -> dict[str, list[str]]:
    """Commands that need one extra, by extra (run where the extra is not installed)."""
    return {
        "onnx": ["export", str(conf), "--workspace", str(ws), "--format", "onnx", "--out",
                 str(tmp / "m.onnx")],
        "export": ["export", str(conf), "--workspace", str(ws), "--format", "safetensors",
                   "--out", str(tmp / "m.safetensors")],
        "plot": ["plot", str(ws), "--out", str(tmp / "p.png")],
        "images": ["data", "images", str(tmp / "images"), "--out", str(tmp / "imgout")],
        "ray": ["train", str(conf), "--engine", "ray", "--workspace", str(tmp / "rayws")],
        "proto": ["compile-proto", str(tmp / "ext.proto"), "--out", str(tmp)],
        "tune": ["tune", str(conf), str(tmp / "ext.proto")],
        "gpu": ["train", str(conf), "--device", "cuda", "--workspace", str(tmp / "gpuws")],
    }  # fmt: skip


def _brought_by(extra: str, other: str) -> bool:
    """Whether installing ``extra`` also installs everything ``other`` names."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    have = {canonicalize_name(d.metadata["Name"]) for d in _closure(list(EXTRAS[extra]))}
    return all(canonicalize_name(Requirement(r).name) in have for r in EXTRAS[other])


def _installable(extra: str) -> str | None:
    from importlib import metadata

    from packaging.requirements import Requirement

    for text in EXTRAS[extra]:
        try:
            metadata.distribution(Requirement(text).name)
        except metadata.PackageNotFoundError:
            return f"{Requirement(text).name} (of the {extra!r} extra) is not installed here"
    return None


@pytest.mark.parametrize("extra", FEATURES)
def test_an_extra_installed_alone_works_and_the_others_are_named(extra, wheel, tmp_path):
    problem = _installable(extra)
    if problem:
        pytest.skip(problem)
    venv = venv_with(extra, wheel, tmp_path / "venv")
    feature(extra, venv, tmp_path)
    # the features of the extras that are not here: exit 2, naming the extra to install
    conf = _small_job(tmp_path / "others")
    ws = tmp_path / "others" / "ws"
    _train(venv, conf, ws, "--no-tensorboard")
    if not (tmp_path / "images").exists():
        _image_folder(tmp_path)  # PNGs for `singa data images` (written by this process)
    (tmp_path / "ext.proto").write_text('syntax = "proto2";\n')
    for other, args in refusals(tmp_path, conf, ws).items():
        if other == extra or _brought_by(extra, other):
            continue  # (matplotlib brings Pillow: the plot extra can read images too)
        res = venv.run("singa", *args)
        assert res.returncode == 2, f"{other} in the {extra} venv: {res.returncode}\n{res.stderr}"
        assert "Traceback" not in res.stderr, res.stderr
        assert f"singa-classic[{other}]" in res.stderr, (
            f"{other} in the {extra} venv:\n{res.stderr}"
        )


def test_every_extra_has_an_end_to_end_check():
    src = Path(__file__).read_text()
    for extra in FEATURES:
        assert f'"{extra}"' in src.split("def feature(")[1].split("def refusals(")[0], extra
