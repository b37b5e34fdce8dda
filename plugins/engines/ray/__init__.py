"""The Ray engine's parts (see :mod:`singa_builtins.engines.ray.engine`). Importing them
does not import Ray: every module imports it inside its functions.

* :mod:`.runtime`: a private local Ray runtime or an existing cluster; its nodes;
* :mod:`.placement`: what each SINGA process asks of a node, the fit check, the placement
  group and which node got which process;
* :mod:`.process`: the actor of one SINGA process: its servers (per-group aggregation,
  ParamShard, inter-group sync) and its worker threads;
* :mod:`.worker`: a worker on Ray: its ParamStub, bridges and checkpoints;
* :mod:`.driver`: starts the actors, relays reports, writes checkpoints, watches for lost
  processes and nodes, restarts, cleans up.
"""
