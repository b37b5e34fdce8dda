"""The shared-memory engine's parts (see :mod:`singa_builtins.engines.shm.engine`).

* :mod:`.topology`: ClusterProto → processes, worker and server placement (§5.1);
* :mod:`.layout`: owner Params → flat offsets, slices, slice → server / server group (§4.1);
* :mod:`.segments`: the ``multiprocessing.shared_memory`` segments of one job;
* :mod:`.launcher`: creates segments, spawns and supervises the processes;
* :mod:`.process`: the entry point of every spawned process (worker and server threads);
* :mod:`.server`: a server thread (aggregation, updater, inter-group sync, §5.5);
* :mod:`.worker`: a worker thread (its ParamStub, TrainingLoop, checkpoints, §5.2-5.4);
* :mod:`.bridge`: the BridgeTransport between workers of a group.
"""
