"""Samplers and early-stopping rules made from a space (Optuna's).

The sampler of trial N is seeded with (study seed, N): random search proposes the same
points for the same seed whatever order trials end in and across ``--resume``; TPE draws
its first ``startup_trials`` points the same way and then models the trials finished so
far (run one trial at a time, the same seed proposes the same points).
"""

from __future__ import annotations

import hashlib


def trial_seed(study_seed: int, number: int) -> int:
    digest = hashlib.sha256(f"singa-tune:{study_seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def sampler(space, study_seed: int, number: int):
    from singa_core.tuning.store import import_optuna

    optuna = import_optuna()
    seed = trial_seed(study_seed, number)
    if space.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=space.sampler_startup)


def pruner(space, train_steps: int):
    from singa_core.tuning.store import import_optuna

    optuna = import_optuna()
    p = optuna.pruners
    if space.stopping == "none":
        return p.NopPruner()
    if space.stopping == "asha":
        return p.SuccessiveHalvingPruner(
            min_resource=max(1, space.min_steps), reduction_factor=space.reduction_factor
        )
    if space.stopping == "hyperband":
        return p.HyperbandPruner(
            min_resource=max(1, space.min_steps),
            max_resource=max(train_steps, space.min_steps + 1),
            reduction_factor=space.reduction_factor,
        )
    return p.MedianPruner(n_startup_trials=space.stopping_startup, n_warmup_steps=space.min_steps)


def describe(space) -> str:
    """``TPE (4 random first), median stopping from step 30``."""
    what = "random search" if space.sampler == "random" else (
        f"TPE ({space.sampler_startup} random first)"
    )  # fmt: skip
    if space.stopping == "none":
        return f"{what}, no early stopping"
    rule = {"median": "median", "asha": "ASHA", "hyperband": "Hyperband"}[space.stopping]
    extra = (
        f" after {space.stopping_startup} trials"
        if space.stopping == "median"
        else f", factor {space.reduction_factor}"
    )
    return f"{what}, {rule} stopping from step {space.min_steps}{extra}"
