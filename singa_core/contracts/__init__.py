"""The plugin contracts: what a plugin implements and the services it calls.

Every kind of pluggable object has its interface here: :mod:`.layer` (Layer, SINGA 0.3
§2.1), :mod:`.param` (Param, ParamGenerator), :mod:`.updater` (Updater, LRChange),
:mod:`.worker` (Worker, a TrainOneBatch algorithm), :mod:`.stub` (ParamStub, the worker's
only way to the parameter servers, and ParamShard, the server side), :mod:`.store`,
:mod:`.dataset`, :mod:`.engine`, and :mod:`.hookspecs` (the pluggy hooks that register
them). Beside them the small services plugins call: :mod:`.errors` (SingaError, located
user errors), :mod:`.blas` (GEMM/AXPY kernels and BLAS thread pinning), :mod:`.resources`
(the memory and CPUs a process may use, container limits included), :mod:`.memory` (the
buffer accounting behind ``Layer.alloc``), :mod:`.names` (generated layer and Param names)
and :mod:`.version`.

Plugins import these through their plugin API 1.0 paths (``singa_core.layer``,
``singa_core.errors``, ...: the same module objects). This room imports nothing of
singa_core but the generated :mod:`singa_core.schema` messages: no net builder, no
runner, no plugin host, no concrete type.
"""
