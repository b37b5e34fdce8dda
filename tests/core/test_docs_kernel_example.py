"""CONTRIBUTING.md's "A layer with its own GPU kernel" runs as written: its code blocks,
put together, are ruff-clean, define the kernel and the layer, their test passes, and the
layer passes the kit's checks on the CPU, the stand-in and standin:cuda (its own CUDA code
run on the CPU)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from singa_core import kernels as K
from singa_core.cuda import EmulatedRuntime
from singa_core.device import CPU, standin_device
from singa_core.testing import check_layer
from tests.conftest import REPO

SECTION = "### A layer with its own GPU kernel"


def _section_code() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n### ", start + len(SECTION))
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    assert len(blocks) == 2, "the section shows the kernel and layer, then their test"
    first, test = blocks
    imports = [line for line in test.splitlines() if line.startswith(("from ", "import "))]
    rest = [line for line in test.splitlines() if not line.startswith(("from ", "import "))]
    head, body = first.split("\n\n\n", 1)  # the imports, then the code
    code = "\n".join([head, *imports]) + "\n\n\n" + body + "\n".join(rest).lstrip("\n")
    return code.rstrip("\n") + "\n"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    if EmulatedRuntime.compiler() is None:
        pytest.skip("needs a C++ compiler (the emulated CUDA runtime)")
    path = tmp_path_factory.mktemp("doc") / "foo_softsign_example.py"
    path.write_text(_section_code())
    spec = importlib.util.spec_from_file_location("foo_softsign_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield path, module
    K._KERNELS.pop("foo_softsign", None)
    K._resolved.clear()
    sys.modules.pop(spec.name, None)


def test_the_example_is_ruff_clean(example):
    path, _ = example
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    done = subprocess.run(
        [ruff, "check", "--isolated", "--select", "E,F,W,I,B,UP", "--line-length", "100",
         str(path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_examples_own_test_passes(example):
    _, module = example
    module.test_softsign_cuda_code_equals_host()


@pytest.mark.parametrize("device", ["cpu", "standin", "standin:cuda"])
def test_the_example_layer_passes_the_kits_checks_on_every_device(example, device):
    _, module = example
    dev = {"cpu": CPU, "standin": standin_device(), "standin:cuda": standin_device("cuda")}
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    check_layer(module.SoftsignLayer, 'name: "s" user_type: "kFooSoftsign"', [x], shape=(4, 6),
                device=dev[device])  # fmt: skip
