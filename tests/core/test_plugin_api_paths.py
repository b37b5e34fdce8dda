"""Plugin API 1.0: every public name imports from the path plugin authors were given, and
each old module path is the very module of its room (so a monkeypatch or isinstance check
through either path sees the same object)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

# documented path -> the public names plugins import from it (CONTRIBUTING, the scaffold)
PUBLIC = {
    "singa_core": ["hookimpl", "Job", "PLUGIN_API_VERSION", "CORE_DISTRIBUTION", "__version__"],
    "singa_core.layer": [
        "Layer",
        "NeuronLayer",
        "InputLayer",
        "OutputLayer",
        "LossLayer",
        "LayerContext",
        "kTrain",
        "kVal",
        "kTest",
        "kDeploy",
        "kForward",
        "kBackward",
        "kAggGrad",
        "kPositive",
        "kNegative",
    ],
    "singa_core.param": ["Param", "ParamGenerator", "DTYPE"],
    "singa_core.updater": ["Updater", "LRChange", "axpy"],
    "singa_core.worker": ["Worker"],
    "singa_core.stub": ["ParamStub", "ParamShard"],
    "singa_core.store": ["Store", "KREAD", "KCREATE", "KAPPEND"],
    "singa_core.dataset": ["DatasetConverter"],
    "singa_core.engine": ["Engine", "TrainResult"],
    "singa_core.hookspecs": ["hookimpl"],
    "singa_core.errors": ["SingaError", "Location", "did_you_mean"],
    "singa_core.blas": [
        "gemm",
        "gemm_acc",
        "set_blas_threads",
        "blas_threads_for",
        "sgemm_at",
        "sgemm_address",
    ],
    "singa_core.device": ["Device", "open_device", "to_host", "copy_into", "default_device"],
    "singa_core.cuda": ["CUPY", "EmulatedRuntime", "multi_tensor_source", "launch_multi_tensor"],
    "singa_core.kernels": ["define_kernel", "implement", "kernels_for", "get_kernel", "Kernel"],
    "singa_core.sequences": [
        "RowIndependent",
        "SequenceRun",
        "SequenceArena",
        "SequenceSlot",
        "stacked",
    ],
    "singa_core.memory": ["charge", "charge_once", "format_bytes", "parse_size"],
    "singa_core.names": ["runtime_param_name", "base_layer_name", "unrolled_name"],
    "singa_core.resources": ["usable_cpus", "cgroup_memory", "cpu_flags", "cache_bytes"],
    "singa_core.jit": ["Compiled", "enabled"],
    "singa_core.numpy_loops": ["loop", "call_unary_intrinsic", "UNARY"],
    "singa_core.plugin_host": ["get_host", "PluginHost"],
    "singa_core.schema": ["job_pb2", "common_pb2"],
    "singa_core.testing": [
        "GradientChecker",
        "GradCase",
        "SourceLayer",
        "build",
        "layer_conf",
        "make_ctx",
        "check_layer",
        "check_updater",
        "check_worker",
        "TableLR",
        "updater_conf",
        "blobs_csv",
        "mlp_job",
        "run_job",
        "peak_bytes",
    ],
}
ALIASED = [
    "layer",
    "param",
    "updater",
    "worker",
    "stub",
    "store",
    "dataset",
    "engine",
    "hookspecs",
    "errors",
    "blas",
    "device",
    "kernels",
    "cuda",
    "sequences",
    "memory",
    "names",
    "resources",
    "jit",
    "numpy_loops",
]


@pytest.mark.parametrize("path", sorted(PUBLIC))
def test_public_names_import_from_their_documented_path(path):
    module = importlib.import_module(path)
    missing = [name for name in PUBLIC[path] if not hasattr(module, name)]
    assert missing == [], f"{path} lacks {missing}"


@pytest.mark.parametrize("name", ALIASED)
def test_old_path_is_the_contract_module_itself(name):
    old = importlib.import_module(f"singa_core.{name}")
    new = importlib.import_module(f"singa_core.contracts.{name}")
    assert old is new
    assert getattr(importlib.import_module("singa_core"), name) is new


def test_a_plugin_importing_old_paths_first_gets_the_same_classes():
    # a fresh interpreter that meets the old path before anything else of the core
    code = (
        "from singa_core.layer import Layer\n"
        "from singa_core.contracts.layer import Layer as L2\n"
        "from singa_core.errors import SingaError\n"
        "from singa_core.contracts.errors import SingaError as E2\n"
        "assert Layer is L2 and SingaError is E2\n"
        "print('same')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "same"
