"""One gradient test over the whole layer registry.

Every layer type the built-in plugins register (aliases excepted: they name the same class)
must have a gradient case in some ``tests/layers/test_layer_*.py`` module's
``GRADIENT_CASES`` (``{"kType": make_case}``, ``make_case(tmp_path)`` returning a
:class:`~singa_core.testing.GradCase` or a list of them); each case is built and its
analytic gradients (every source and every Param) are compared with central differences
by :class:`singa_core.testing.GradientChecker`, then the rest of the layer contract is
checked on the same layer (``check_layer_contract``: kAggGrad accumulation, a checkpoint
round trip of its Params, repeatable results) — the plugin author's kit, run on every
built-in type.
A new built-in layer type without a case makes ``test_every_registered_layer_has_a_case``
fail.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.layers
from singa_core.plugin_host.host import get_host
from singa_core.testing import GradCase

#: the case modules that skipped at import (an optional extra missing), with the reason: their
#: types' cases are absent, and the other types' cases still run
SKIPPED_MODULES: dict[str, str] = {}


def _collect_cases() -> dict[str, object]:
    cases: dict[str, object] = {}
    for info in pkgutil.iter_modules(tests.layers.__path__):
        if not info.name.startswith("test_layer_"):
            continue
        try:
            module = importlib.import_module(f"tests.layers.{info.name}")
        except pytest.skip.Exception as skipped:  # e.g. importorskip("lmdb")
            SKIPPED_MODULES[info.name] = str(skipped.msg)
            continue
        for name, make in getattr(module, "GRADIENT_CASES", {}).items():
            assert name not in cases, f"two gradient cases for {name}"
            cases[name] = make
    return cases


CASES = _collect_cases()


def _builtin_layer_types() -> dict[str, type]:
    registry = get_host().registries["layer"]
    return {
        name: entry.obj
        for name, entry in registry.entries.items()
        if entry.provider.dist == "singa-classic" and entry.alias_of is None
    }


def test_every_registered_layer_has_a_case():
    registered = _builtin_layer_types()
    missing = sorted(set(registered) - set(CASES))
    if missing and SKIPPED_MODULES:
        pytest.skip(
            f"no case for {missing}: case modules skipped here "
            + "; ".join(f"{m}: {why}" for m, why in sorted(SKIPPED_MODULES.items()))
        )
    assert not missing, f"built-in layer types without a gradient case: {missing}"
    stale = sorted(set(CASES) - set(registered))
    assert not stale, f"gradient cases for types that are not registered: {stale}"


def test_aliases_name_checked_classes():
    registry = get_host().registries["layer"]
    for name, entry in registry.entries.items():
        if entry.provider.dist == "singa-classic" and entry.alias_of is not None:
            assert entry.alias_of in CASES, name


@pytest.mark.parametrize("type_name", sorted(CASES))
def test_gradient(type_name, tmp_path):
    made = CASES[type_name](tmp_path)
    registered = _builtin_layer_types().get(type_name)
    assert registered is not None, f"{type_name} is not registered"
    for case in made if isinstance(made, list) else [made]:
        assert isinstance(case, GradCase)
        assert isinstance(case.layer, registered), (
            f"the case for {type_name} builds a {type(case.layer).__name__}, "
            f"not the registered {registered.__name__}"
        )
        case.run()


@pytest.mark.parametrize("code", ["host", "cuda"])
@pytest.mark.parametrize("type_name", sorted(CASES))
def test_gradient_on_a_device(type_name, tmp_path, code):
    """The same case on the stand-in device (singa_core/contracts/standin.py): arrays that
    refuse silent conversion to numpy, as CuPy's do. A layer that computes on the host,
    allocates numpy arrays, or mixes them with its device arrays fails here as it would on
    a GPU; the gradients must still match. ``code="cuda"``: on standin:cuda, every kernel
    the layer calls runs its CUDA code (emulated), so the finite differences check the
    code a GPU runs."""
    from singa_core.device import standin_device, using_device

    cls = _builtin_layer_types()[type_name]
    assert cls.placement in ("device", "host"), f"{type_name} does not say where it computes"
    if cls.placement == "host":  # reads or writes files on the CPU: the net copies its data
        pytest.skip(f"{type_name} computes on the host (placement = 'host')")
    device = standin_device(code)
    with using_device(device):
        made = CASES[type_name](tmp_path)
        for case in made if isinstance(made, list) else [made]:
            assert case.layer.device == device
            if case.layer.data is not None:
                assert type(case.layer.data) is device.xp.ndarray, (
                    f"{type_name}: data is a {type(case.layer.data).__name__}, "
                    "not an array of the layer's device"
                )
            case.run()


@pytest.mark.parametrize("type_name", sorted(CASES))
def test_gradient_on_the_gpu(type_name, tmp_path):
    """The same cases on a real GPU (cuda:0 through CuPy); skipped with the reason where
    there is none (CI: the stand-in above runs the same code paths)."""
    from singa_core.device import open_device, using_device
    from singa_core.testing import gpu_skip_reason

    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    if _builtin_layer_types()[type_name].placement != "device":
        pytest.skip(f"{type_name} computes on the host (placement = 'host')")
    device = open_device("cuda:0")
    with using_device(device):
        made = CASES[type_name](tmp_path)
        for case in made if isinstance(made, list) else [made]:
            assert case.layer.device == device
            case.run()
