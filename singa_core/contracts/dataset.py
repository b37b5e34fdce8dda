"""Interface of dataset converters behind ``singa data NAME``."""

from __future__ import annotations

from pathlib import Path


class DatasetConverter:
    """Contract for dataset plugins.

    ``name`` is the command word (``singa data mnist``); ``files`` maps each raw file name to
    ``(sha256, size, url or None)``. ``convert(source_dir, out_dir, log)`` reads the raw
    files from ``source_dir`` and writes SINGA's stores into ``out_dir``, returning the
    paths written. Finding or downloading the raw files is done by the core.
    """

    name: str = ""
    description: str = ""
    env_subdir: str = ""  # folder below $SINGA_DATA holding the raw files
    files: dict[str, tuple[str, int, str | None]] = {}

    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:  # pragma: no cover
        raise NotImplementedError

    def options_help(self) -> str:
        """The converter's own arguments and options (those ``configure(args)`` takes), as
        ``singa data NAME --help`` lists them below --out and --from; empty: none."""
        return ""
