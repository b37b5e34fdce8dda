"""The Ray engine's parts (see :mod:`singa_builtins.engines.ray.engine`). Importing them
does not import Ray: every module imports it inside its functions.

* :mod:`.runtime`: a private local Ray runtime (with a token of its own) or an existing
  cluster; its nodes; :mod:`.auth`: whether a cluster answers and checks tokens;
* :mod:`.placement`: what each SINGA process asks of a node, the fit check, the plan of
  which node runs which process (``group``, ``spread``, ``pack``), the placement group;
* :mod:`.traffic`: the bytes a placement moves between nodes, and the closing note;
* :mod:`.nodecheck`: the per-node start-up check (versions, /dev/shm, dead jobs' segments)
  and the clean-up after an attempt;
* :mod:`.process`: the actor of one SINGA process: its servers (per-group aggregation,
  ParamShard, inter-group sync) and its worker threads; :mod:`.segments`,
  :mod:`.channels`, :mod:`.gateway`: shared memory, pipes and gateways between the actors
  of a node;
* :mod:`.worker`: a worker on Ray: its ParamStub, bridges and checkpoint requests;
* :mod:`.checkpoints`: checkpoint records from the servers' snapshots;
* :mod:`.faults`: which Ray errors mean a lost process, node or object;
* :mod:`.driver`: starts the actors, relays reports, writes checkpoints, watches for lost
  processes and nodes, restarts, cleans up; :mod:`.dryrun`: ``--dry-run``.
"""
