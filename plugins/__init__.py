"""singa's built-in types, shipped as plugins through the ``singa`` entry-point group.

Each subpackage is one entry point (see pyproject.toml) and holds one type per module.
"""
