"""``singa export --format safetensors``: a trained model's Params for other tools.

Every Param of the checkpoint under its job.conf name (SINGA's runtime prefix ``0#``
dropped: ``w1``, not ``0#w1``), with the value and shape the checkpoint stores (weights
``(out, in)`` as SINGA keeps them), float32. The metadata holds the job.conf text
(``job.conf``), the checkpoint files (``checkpoint``) and the singa version (``singa``), so
the file says what net the values belong to. Written atomically; needs the ``safetensors``
package (``pip install 'singa-classic[export]'``).
"""

from __future__ import annotations

from pathlib import Path

from singa_core.contracts.errors import SingaError


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
    atomic_write_bytes(out, save(values, metadata=metadata), "safetensors file")
    total = sum(v.size for v in values.values())
    return (
        f"wrote {out}: {len(values)} Params, {total:,} values (from {', '.join(map(str, files))})"
    )
