"""Counts, sizes and shapes of a job.conf that cannot be what they say (issue 38 point 8).

protobuf's ``int32`` takes any value, and a negative count used to be taken as the nearest
sensible one without a word (``nworkers_per_group: -1`` ran one worker). :func:`check_limits`
walks every field set in the JobProto (the file and the ``-o`` overrides), layer confs
included, and refuses a value outside its field's range, located at the field (or the
``-o`` that set it), with the line to write. Fields left out keep their defaults and are not
checked; extension fields belong to their plugins, which check their own.

Some fields are checked again later with more context (a store's batch size split across
partitions, a pooling window that must fit its input): the limits here are only what no
job can mean.
"""

from __future__ import annotations

from typing import NamedTuple

from singa_core.contracts.errors import SingaError


class Limit(NamedTuple):
    low: int
    high: int | None  # None: no upper bound here
    what: str  # what the value is, for the message: "a number of steps"
    example: int


STEPS = Limit(0, None, "a number of steps, 0 for none", 100)
BATCH = Limit(1, None, "a batch size", 64)
AFTER = Limit(0, None, "a step number", 0)
COUNT = Limit(1, None, "a count", 1)
SIZE = Limit(1, None, "a size", 3)
PAD = Limit(0, None, "a padding", 1)
DIM = Limit(0, None, "a dimension index", 0)
NONNEG = Limit(0, None, "a number that cannot be negative", 0)

#: a convolution's or pooling's window: kernel, pad and stride, for both axes or each
WINDOW_LIMITS = {
    **{f"kernel{axis}": SIZE for axis in ("", "_x", "_y")},
    **{f"pad{axis}": PAD for axis in ("", "_x", "_y")},
    **{f"stride{axis}": SIZE for axis in ("", "_x", "_y")},
}

#: message full name -> field -> its limit (repeated fields: every entry)
LIMITS: dict[str, dict[str, Limit]] = {
    "singa.JobProto": {
        "warmup_steps": STEPS,
        "num_openblas_threads": Limit(1, None, "a number of threads", 1),
        "checkpoint_after": AFTER,
        "disp_after": AFTER,
        "test_after": AFTER,
        "validate_after": AFTER,
        "step": AFTER,
    },
    "singa.ClusterProto": {
        "nworker_groups": COUNT,
        "nserver_groups": COUNT,
        "nworkers_per_group": COUNT,
        "nservers_per_group": COUNT,
        "nworkers_per_procs": COUNT,
        "nservers_per_procs": COUNT,
        "sync_freq": Limit(1, None, "a number of updates", 1),
        "start_port": Limit(0, 65535, "a port number", 6723),
        "poll_time": Limit(0, None, "a time in milliseconds", 100),
    },
    "singa.CDProto": {"cd_k": Limit(1, None, "a number of Gibbs steps", 1)},
    "singa.NetProto": {
        "unroll_len": Limit(1, None, "a number of unrolled copies", 1),
        "partition_dim": Limit(0, 1, "a partition dimension: 0 the batch, 1 the features", 0),
    },
    "singa.LayerProto": {
        "unroll_len": Limit(1, None, "a number of unrolled copies", 1),
        "unroll_index": NONNEG,
        "partition_dim": Limit(
            -1, 1, "a partition dimension: 0 the batch, 1 the features, -1 the net's", 0
        ),
        "partition_id": NONNEG,
        "num_partitions": COUNT,
    },
    "singa.ParamProto": {"shape": SIZE},
    "singa.FixedStepProto": {"step": AFTER},
    "singa.StepProto": {"change_freq": Limit(0, None, "a number of steps", 100)},
    "singa.LinearProto": {"change_freq": Limit(0, None, "a number of steps", 100)},
    "singa.ExponentialProto": {"change_freq": Limit(0, None, "a number of steps", 100)},
    "singa.DataProto": {"batchsize": BATCH, "random_skip": NONNEG},
    "singa.MnistProto": {"kernel": NONNEG, "resize": NONNEG, "elastic_freq": NONNEG},
    "singa.RGBImageProto": {"cropsize": NONNEG},
    "singa.CharRNNProto": {"unroll_len": COUNT, "batchsize": BATCH},
    "singa.OnehotProto": {"vocab_size": NONNEG},
    "singa.ConvolutionProto": {
        **WINDOW_LIMITS,
        "num_filters": COUNT,
        "workspace_byte_limit": NONNEG,
    },
    "singa.PoolingProto": WINDOW_LIMITS,
    "singa.DummyProto": {"shape": SIZE},
    "singa.InnerProductProto": {"num_output": COUNT},
    "singa.LRNProto": {"local_size": SIZE},
    "singa.RBMProto": {"hdim": COUNT},
    "singa.GRUProto": {"dim_hidden": COUNT},
    "singa.SoftmaxProto": {"num_softmax_per_instance": COUNT},
    "singa.EmbeddingProto": {"vocab_size": NONNEG, "feature_dim": COUNT},
    "singa.SoftmaxLossProto": {"topk": COUNT},
    "singa.ArgSortProto": {"topk": COUNT},
    "singa.ConcateProto": {"concate_dim": DIM, "num_concates": COUNT},
    "singa.SliceProto": {"slice_dim": DIM, "num_slices": COUNT},
    "singa.SplitProto": {"num_splits": COUNT},
    "singa.RNNDummyProto": {"shape": SIZE},
    "singa.StoreProto": {"batchsize": BATCH, "shape": SIZE, "random_skip": NONNEG},
}


def _walk(msg, path: str):
    """(path, field, value, index) of every scalar field set in ``msg`` and its messages
    (extensions left to their plugins)."""
    for fd, value in msg.ListFields():
        if fd.is_extension:
            continue
        here = f"{path}.{fd.name}" if path else fd.name
        if fd.message_type is not None:
            items = value if fd.is_repeated else [value]
            for i, sub in enumerate(items):
                yield from _walk(sub, f"{here}[{i}]" if fd.is_repeated else here)
        else:
            items = value if fd.is_repeated else [value]
            for i, v in enumerate(items):
                yield here, fd, v, i if fd.is_repeated and len(items) > 1 else None


def _range(limit: Limit) -> str:
    if limit.high is not None:
        return f"from {limit.low} to {limit.high}"
    return "0 or more" if limit.low == 0 else f"at least {limit.low}"


def check_limits(cfg) -> None:
    """Refuse the first field of ``cfg.job`` outside its range (see :data:`LIMITS`)."""
    for path, fd, value, index in _walk(cfg.job, ""):
        limit = LIMITS.get(fd.containing_type.full_name, {}).get(fd.name)
        if limit is None or not isinstance(value, int):
            continue
        if value >= limit.low and (limit.high is None or value <= limit.high):
            continue
        layer, inside = _in_layer(cfg.job, path)
        shown = inside if index is None else f"{inside}[{index}]"
        default = f"; left out it is {fd.default_value}" if fd.has_default_value else ""
        raise SingaError(
            f"{layer}{shown} is {value}; it must be {_range(limit)} ({limit.what})",
            where=cfg.locate(path),
            help=f"write e.g. `{fd.name}: {limit.example}`{default}",
        )


def _in_layer(job, path: str) -> tuple[str, str]:
    """(``layer 'conv1': ``, the path inside that layer) for a field of a named
    ``neuralnet.layer[k]``; else ("", the whole path)."""
    prefix = "neuralnet.layer["
    if not path.startswith(prefix):
        return "", path
    end = path.index("]")
    name = job.neuralnet.layer[int(path[len(prefix) : end])].name
    return (f"layer '{name}': ", path[end + 2 :]) if name else ("", path)
