"""The Python API: :class:`singa_core.Job` (:mod:`.job`).

The same runs as the command line, from a notebook or a sweep script: train, test, look at
the nets, callbacks on metrics, and the trained model (``job.model()``: predict, export).
``singa train``/``test``/``predict`` run through it.

Imports the rooms below it (contracts, plugin_host, jobconf, netbuilder, running,
inference); never the commands.
"""
