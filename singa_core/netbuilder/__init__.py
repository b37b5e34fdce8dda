"""The net builder: from a NetProto to set-up layers and Params (SINGA 0.3 §4).

* :mod:`.net`: NeuralNet (phase filter, graph transforms, split layers, topological order,
  layer set-up, Param binding and initialisation);
* :mod:`.unrolling` and :mod:`.partition`: the graph transforms for recurrent nets and for
  the workers of a group;
* :mod:`.slicing`: Param slices for the parameter servers (§4.1);
* :mod:`.fusion`: work fused across an edge of a built net on a device (a bias added in
  its only reader's launch);
* :mod:`.sequences`: the arenas an unrolled layer's copies allocate from, and the units
  (runs of all copies at once, single layers) a kBPTT worker executes.

Imports :mod:`singa_core.contracts`, :mod:`singa_core.schema` and the registries of
:mod:`singa_core.plugin_host`; never the runner or the commands.
"""
