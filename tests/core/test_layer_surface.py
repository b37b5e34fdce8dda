"""What a plugin author sees of Layer stays small: its public names (class attributes,
methods and what a bare layer sets on itself) are at most 48, and the core's plumbing (the
checkpoint's and numeric guard's metric bookkeeping, bias fusion, the requested device)
is not among them."""

from __future__ import annotations

from singa_core.layer import AbsorbsBias, DefersBias, Layer
from singa_core.testing import layer_conf

#: the bound of the kernel-seam issue (64 names before it)
MOST = 48


def _public_names() -> set[str]:
    layer = Layer(layer_conf('name: "x"'))
    names = {n for n in dir(Layer) if not n.startswith("_")}
    names |= {n for n in vars(layer) if not n.startswith("_")}
    return names | {"type_names"}  # every registered class sets it


def test_layer_shows_an_author_at_most_48_names():
    names = _public_names()
    assert len(names) <= MOST, sorted(names)


def test_the_cores_plumbing_is_not_on_layer():
    names = _public_names()
    plumbing = {"metric_state", "load_metric_state", "peek_metrics", "count_metrics",
                "host_labels", "host_data", "requested_device", "guarded", "absorbs_bias",
                "absorbed_bias", "deferred_bias", "bias_to_defer", "deploy_role_for",
                "partitioned_size", "unroll_index"}  # fmt: skip
    assert names & plumbing == set()
    # bias fusion is an opt-in protocol of its own
    assert {"absorbed_bias"} <= set(dir(AbsorbsBias))
    assert {"deferred_bias", "bias_to_defer"} <= set(dir(DefersBias))
