"""Every numpy call of the code that runs on a device exists in CuPy with the arguments it
is given. numpy's functions reach CuPy through NEP-18 dispatch, so a function CuPy lacks,
or an argument it does not take (einsum's out=, take's mode=), fails only on a GPU; this
reads the sources and asks the installed CuPy (no GPU needed: CuPy imports without one).
Skipped where CuPy is not installed (CI); the stand-in device refuses the arguments it
knows CuPy lacks (singa_core.contracts.standin.CUPY_UNSUPPORTED)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tests.conftest import REPO

cupy = pytest.importorskip("cupy", reason="needs CuPy (the gpu extra) to read its API")

FILES = [
    *sorted((REPO / "plugins" / "layers").glob("*.py")),
    *sorted((REPO / "plugins" / "updaters").glob("*.py")),
    *(REPO / "singa_core" / p for p in (
        "contracts/updater.py", "contracts/blas.py", "contracts/stub.py", "running/numeric.py",
        "netbuilder/transfer.py",
    )),
]  # fmt: skip
HOST_ONLY = {"errstate", "frombuffer", "dtype", "iinfo", "finfo"}  # never given device arrays


def _numpy_calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        fn, parts = node.func, []
        while isinstance(fn, ast.Attribute):
            parts.append(fn.attr)
            fn = fn.value
        if isinstance(fn, ast.Name) and fn.id == "np" and parts:
            yield ".".join(reversed(parts)), [k.arg for k in node.keywords if k.arg], node.lineno


def test_numpy_calls_exist_in_cupy_with_their_arguments():
    problems = []
    for path in FILES:
        for name, kws, line in _numpy_calls(path):
            if name.split(".")[0] in HOST_ONLY:
                continue
            obj = cupy
            for part in name.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    break
            where = f"{path.relative_to(REPO)}:{line}"
            if obj is None:
                problems.append(f"{where}: cupy has no {name}")
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue  # a ufunc or a compiled function: takes out= and the usual
            if any(p.kind == p.VAR_KEYWORD for p in params.values()):
                continue
            bad = [k for k in kws if k not in params]
            if bad:
                problems.append(f"{where}: cupy.{name} takes no {', '.join(bad)}")
    assert not problems, "\n".join(problems)
