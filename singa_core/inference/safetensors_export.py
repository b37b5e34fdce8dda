"""``singa export --format safetensors``: a trained model's Params for other tools.

Every Param of the checkpoint under its job.conf name (SINGA's runtime prefix ``0#``
dropped: ``w1``, not ``0#w1``), with the value and shape the checkpoint stores (weights
``(out, in)`` as SINGA keeps them), float32. The metadata holds the job.conf text
(``job.conf``), the checkpoint files (``checkpoint``) and the singa version (``singa``), so
the file says what net the values belong to; ``tensors`` (JSON) gives each Param's layer,
type and the shapes that layer takes and gives; the data layers' mean and std images are
stored as tensors ``preprocess/<layer>/mean`` and ``/std`` (their constants in
``preprocess``), the class names of ``labels.txt`` in ``labels``
(:mod:`singa_core.inference.safetensors_layout`). Written atomically; needs the
``safetensors`` package (``pip install 'singa-classic[export]'``).
"""

from __future__ import annotations

import json
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.inference.safetensors_layout import class_names, describe_params, preprocessing


def export_safetensors(run, out: str | Path, checkpoint=None) -> str:
    """Write the Params of ``run``'s checkpoint (a :class:`singa_core.Job`) to ``out``."""
    try:
        from safetensors.numpy import save
    except ImportError:
        raise SingaError(
            "exporting to safetensors needs the safetensors package",
            where="--format",
            help="pip install 'singa-classic[export]'",
        ) from None
    from singa_core.contracts.version import __version__
    from singa_core.inference.model import checkpoint_files, read_model_values
    from singa_core.running.fileio import atomic_write_bytes

    job = run.cfg.job
    ws = run.workspace_override or (
        job.cluster.workspace if job.cluster.HasField("workspace") else ""
    )
    files = checkpoint_files(ws, checkpoint, list(job.checkpoint_path))
    values = read_model_values(files)
    metadata = {
        "job.conf": run.cfg.text or Path(run.cfg.path).read_text(encoding="utf-8"),
        "checkpoint": ", ".join(map(str, files)),
        "singa": __version__,
    }
    try:  # the layer, type and shapes of every Param, from the deploy net
        layout = describe_params(run.model(checkpoint))
    except SingaError:  # a job without a deploy net: the Params alone
        layout = {}
    if layout:
        metadata["tensors"] = json.dumps(layout, sort_keys=True)
    extra, constants = preprocessing(job, run.host.get)
    if constants:
        metadata["preprocess"] = json.dumps(constants, sort_keys=True)
    labels = class_names(run.cfg.path)
    if labels is not None:
        metadata["labels"] = json.dumps(labels)
    tensors = {**values, **{k: v for k, v in extra.items() if k not in values}}
    atomic_write_bytes(out, save(tensors, metadata=metadata), "safetensors file")
    total = sum(v.size for v in values.values())
    also = f"; also {', '.join(sorted(extra))}" if extra else ""
    return (
        f"wrote {out}: {len(values)} Params, {total:,} values (from {', '.join(map(str, files))})"
        f"{also}"
    )
