"""Running a job: from a parsed job.conf to trained, checkpointed Params.

* :mod:`.job`: PreparedJob (every check that can fail on the user's input before step 0);
* :mod:`.training`: the engine-independent training loop of one worker;
* :mod:`.checkpoint`: SINGA 0.3's checkpoint format plus what exact resume needs;
* :mod:`.numeric`: guards against non-finite numbers; :mod:`.reporting` and
  :mod:`.tensorboard`: what a running job shows and writes;
* :mod:`.fileio` (atomic files), :mod:`.paths` (path checks) and :mod:`.workspace` (one run
  per workspace: its lock, an earlier run's checkpoints moved aside).

Imports the rooms below it (contracts, schema, plugin_host, jobconf, netbuilder); never
the commands.
"""
