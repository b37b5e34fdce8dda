"""Validation helpers shared by the built-in learning-rate change methods."""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError


def f32(x: float) -> float:
    """Round ``x`` to float32 like SINGA's ``float LRGenerator::Get`` return value."""
    return float(np.float32(x))


def require_change_freq(method: str, conf_name: str, sub, example: str) -> int:
    """``sub.change_freq`` as a positive int, or a SingaError saying how to set it."""
    freq = int(sub.change_freq)
    if freq <= 0:
        raise SingaError(
            f"{method} needs learning_rate.{conf_name}.change_freq > 0 (got {freq})",
            help=f"add `{conf_name} {{ {example} }}` inside learning_rate",
            field=f"{conf_name}.change_freq",
        )
    return freq


def require_set(method: str, conf, conf_name: str, field: str, example: str) -> None:
    """Raise unless ``conf.<conf_name>.<field>`` was given (a required field in 0.3)."""
    if not conf.HasField(conf_name) or not getattr(conf, conf_name).HasField(field):
        raise SingaError(
            f"{method} needs learning_rate.{conf_name}.{field}, which is not set",
            help=f"add `{conf_name} {{ {example} }}` inside learning_rate",
            field=conf_name,
        )
