"""The host's SGEMM: numpy's OpenBLAS or MKL (the ``mkl`` extra), chosen from the machine
(singa_core/contracts/sgemm.py), and every host GEMM through it with alpha and beta."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from singa_core.blas import gemm
from singa_core.contracts import sgemm

INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\n"
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: EPYC\n"


def test_the_rule_reads_the_cpu():
    both = {"openblas", "mkl"}
    assert sgemm.cpu_vendor(INTEL) == "GenuineIntel" and sgemm.cpu_vendor(AMD) == "AuthenticAMD"
    assert sgemm.rule("GenuineIntel", both)[0] == "mkl"
    name, why = sgemm.rule("AuthenticAMD", both)
    assert name == "openblas" and "AuthenticAMD" in why
    assert sgemm.rule("GenuineIntel", {"openblas"})[0] == "openblas"  # no extra
    assert sgemm.rule("AuthenticAMD", both, "mkl") == ("mkl", "SINGA_SGEMM=mkl")
    assert sgemm.rule("GenuineIntel", both, "openblas")[0] == "openblas"


def _choose(env: dict) -> subprocess.CompletedProcess:
    code = (
        "from singa_core.contracts import sgemm\n"
        "from singa_core.errors import SingaError\n"
        "try:\n    print(sgemm.describe())\n"
        "except SingaError as e:\n    print('ERROR', e, '|', e.help)\n"
    )
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )


def test_a_forced_library_that_is_not_there_or_unknown_is_named():
    res = _choose({"SINGA_SGEMM": "blis"})
    assert "SINGA_SGEMM='blis' is not a BLAS singa knows" in res.stdout, res.stdout
    assert "openblas, mkl, or auto" in res.stdout
    res = _choose({"SINGA_SGEMM": "openblas"})
    assert res.stdout.startswith("sgemm: openblas ") and "SINGA_SGEMM=openblas" in res.stdout
    if sgemm.mkl_path() is None:
        res = _choose({"SINGA_SGEMM": "mkl"})
        assert "mkl is not installed here" in res.stdout and "singa-classic[mkl]" in res.stdout


NO_MKL = "needs the mkl extra (pip install 'singa-classic[mkl]')"
LIBRARIES = [
    "openblas",
    pytest.param("mkl", marks=pytest.mark.skipif(sgemm.mkl_path() is None, reason=NO_MKL)),
]


@pytest.fixture
def use(monkeypatch):
    def choose(name: str):
        monkeypatch.setenv("SINGA_SGEMM", name)
        sgemm.forget()
        lib = sgemm.chosen()
        assert lib is not None and lib.name == name
        return lib

    yield choose
    monkeypatch.delenv("SINGA_SGEMM")
    sgemm.forget()


@pytest.mark.parametrize("name", LIBRARIES)
def test_each_library_computes_alpha_ab_plus_beta_c_on_strided_views(use, name):
    use(name)
    rng = np.random.default_rng(0)
    big = rng.standard_normal((70, 90), dtype=np.float32)
    a = big[3:40, 5:60]  # a block of a wider matrix (leading dimension 90)
    b = rng.standard_normal((33, 55), dtype=np.float32).T  # a transposed view
    for alpha, beta in ((1.0, 0.0), (-0.25, 1.0), (0.5, 0.75)):
        c = rng.standard_normal((37, 33), dtype=np.float32)
        want = alpha * (a.astype(np.float64) @ b) + beta * c
        gemm(a, b, c, alpha=alpha, beta=beta)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(sgemm.mkl_path() is None, reason="needs the mkl extra")
def test_mkl_takes_the_process_thread_count(use):
    from singa_core.blas import set_blas_threads

    lib = use("mkl")
    set_blas_threads(1)
    import ctypes

    get = ctypes.CDLL(sgemm.mkl_path()).MKL_Get_Max_Threads
    assert get() == 1
    set_blas_threads(2)
    assert get() == 2
    assert lib.version and lib.version[0].isdigit()


@pytest.mark.parametrize("name", LIBRARIES)
def test_axpy_runs_on_the_chosen_library(use, name):
    from singa_core.blas import axpy

    use(name)
    rng = np.random.default_rng(1)
    x, y = (
        rng.standard_normal(70_001, dtype=np.float32),
        rng.standard_normal(70_001, dtype=np.float32),
    )
    want = y.astype(np.float64) - 0.375 * x
    axpy(-0.375, x, y)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", LIBRARIES)
def test_a_fixed_operand_multiplies_as_gemm_with_its_b(use, name):
    """blas.FixedOperand: packed once by MKL (plain GEMMs elsewhere), its products equal
    gemm's with the plain b; a different a, an alpha or a new b still come out right."""
    from singa_core.blas import FixedOperand

    lib = use(name)
    rng = np.random.default_rng(2)
    u = rng.standard_normal((96, 40), dtype=np.float32)
    fixed = FixedOperand(7)
    for b in (u.T, u[:, :33]):  # a transposed view, then a block of a wider matrix
        fixed.set(b)
        assert (fixed._dims is not None) == (lib.packed is not None)
        for trans_a in (False, True):
            a = rng.standard_normal((7, b.shape[0]), dtype=np.float32)
            a = np.ascontiguousarray(a.T).T if trans_a else a
            for alpha, beta in ((1.0, 0.0), (1.0, 1.0), (0.5, 1.0)):
                c = rng.standard_normal((7, b.shape[1]), dtype=np.float32)
                want = c.copy()
                gemm(a, b, want, alpha=alpha, beta=beta)
                gemm(a, fixed, c, alpha=alpha, beta=beta)
                np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    more = rng.standard_normal((9, 40), dtype=np.float32)  # other rows: a plain GEMM
    c = np.empty((9, 96), np.float32)
    fixed.set(u.T)
    gemm(more, fixed, c)
    np.testing.assert_allclose(c, more @ u.T, rtol=1e-5, atol=1e-5)
