"""numba's disk cache hits in a second process for kernels that call other kernels.

A compiled function that captures another compiled function or an intrinsic used to get a
new cache key in every process (numba pickles them with a random identity), so nothing was
ever loaded from the cache and every process added files to it (cache_keys.py). Each case
runs the same program twice in fresh processes over a private NUMBA_CACHE_DIR and reads
numba's own hit and miss counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")

# a kernel calling a helper kernel and an intrinsic, built the way singa's modules build
# theirs (inside a Compiled's build(), so that the kernel captures both)
TOY = textwrap.dedent(
    """
    import json, sys
    import numba
    import numpy as np
    from numba.extending import intrinsic
    from singa_core import jit as jit_contract

    if sys.argv[1] == "unpinned":
        jit_contract.pin_identities = lambda built: True  # as before the fix

    def build(offset=1.0):
        njit = numba.njit(cache=True)

        @intrinsic
        def same(typingctx, x):
            def codegen(context, builder, signature, args):
                return args[0]
            return x(x), codegen

        @njit
        def helper(v):
            return same(v) + offset

        @njit
        def caller(a):
            s = 0.0
            for v in a:
                s += helper(v)
            return s

        class Kernels:
            pass

        k = Kernels()
        k.caller = caller
        return k

    k = jit_contract.Compiled(build).get()
    total = k.caller(np.arange(4.0))
    stats = k.caller.stats
    print(json.dumps({"total": total, "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
    """
)


def _run(script, tmp_path, *args) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), SINGA_NUMBA="1")
    out = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh processes compiling: 4-9 s
def test_second_process_loads_a_kernel_that_captures_kernels(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(TOY)
    first = _run(script, tmp_path, "pinned")
    second = _run(script, tmp_path, "pinned")
    assert first["total"] == second["total"] == 10.0
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (second["hits"], second["misses"]) == (1, 0)
    index_files = list((tmp_path / "cache").rglob("*caller*.nbi"))
    assert len(index_files) == 1


@pytest.mark.slow  # two fresh processes compiling: 4-9 s
def test_without_pinned_identities_the_cache_misses(tmp_path):
    """The case above fails without the fix: it measures what it claims."""
    script = tmp_path / "toy.py"
    script.write_text(TOY)
    _run(script, tmp_path, "unpinned")
    second = _run(script, tmp_path, "unpinned")
    assert (second["hits"], second["misses"]) == (0, 1)


def test_other_captured_values_give_other_identities():
    import numba

    from singa_core.contracts.cache_keys import pin_identities

    def build(offset):
        @numba.njit
        def helper(v):
            return v + offset

        @numba.njit
        def caller(v):
            return helper(v)

        return (caller,)

    a, b, a2 = build(1.0), build(2.0), build(1.0)
    for built in (a, b, a2):
        assert pin_identities(built)
    assert a[0]._uuid != b[0]._uuid  # another offset: another key
    assert a[0]._uuid == a2[0]._uuid  # the same kernels: the same key


LRN = textwrap.dedent(
    """
    import json
    import numpy as np
    from singa_builtins.layers._host_kernels import kernels

    k = kernels()
    x = np.random.default_rng(0).random((2, 8, 12), dtype=np.float32)  # (outer, C, inner)
    y, norm, powb = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    k.lrn_forward(x, y, norm, powb, 2, np.float32(1e-4), np.float32(1.0), 1, 1)
    stats = k.lrn_forward.compiled.stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
    """
)


@pytest.mark.slow  # two processes compiling numba's LRN passes: about 6 s
def test_lrn_passes_load_from_the_cache_in_a_second_process(tmp_path):
    """singa's own LRN kernel (it calls two helper kernels) through its threaded wrapper."""
    script = tmp_path / "lrn.py"
    script.write_text(LRN)
    first = _run(script, tmp_path)
    second = _run(script, tmp_path)
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (second["hits"], second["misses"]) == (1, 0)


def test_a_value_that_does_not_pickle_leaves_the_kernel_as_it_was(monkeypatch):
    """Where numba's pickle of the captured values fails, the kernel keeps numba's random
    identity (no cache hit, as before) and nothing breaks."""
    import numba
    import numba.core.serialize as serialize

    from singa_core.contracts.cache_keys import pin_identities

    def refuse(obj):
        raise TypeError("cannot pickle")

    offset = 1.0

    @numba.njit
    def helper(v):
        return v + offset

    monkeypatch.setattr(serialize, "dumps", refuse)
    assert pin_identities((helper,))
    monkeypatch.undo()
    assert not helper._uuid.startswith("singa-")  # drawn by numba, as before
    assert helper(1.0) == 2.0
