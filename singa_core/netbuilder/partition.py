"""Net partitioning across the workers of a group (SINGA 0.3 §4 steps 6-7 and 9c).

A graph transform (see :data:`singa_core.netbuilder.net.GRAPH_TRANSFORMS`), active when a
net is built with ``num_partitions`` > 1 (an engine passes ``nworkers_per_group``). Every layer has
a ``partition_dim``: 0 splits the batch (data parallelism), 1 splits the features (model
parallelism); a layer's own value overrides NetProto's.

1. **Connection layers**, per edge ``src → dst`` of the configured net:

   * ``dst`` partitioned on dimension 1 and needing its whole source (a layer class with
     ``needs_whole_source = True``: kInnerProduct, the convolutions, kSoftmax):
     ``src → split(src) → concate(split(src)) → dst`` — every partition of ``dst`` gets
     the source of all partitions, concatenated along the source's partition dimension;
   * equal partition dimensions: a direct edge;
   * otherwise ``src → slice(src) → concate(slice(src)) → dst``: each partition slices its
     part along ``dst``'s dimension and ``dst``'s partition j gathers slice j of every
     partition along ``src``'s dimension.

2. **Replicas**: every layer ``L`` becomes ``L@0 … L@(n−1)`` (``partition_id``,
   ``num_partitions`` set); an edge joins ``src@i → dst@i``, except into the inserted
   concate layers, which take part ``i`` from every partition ``i``: directly when
   ``i = j``, else through a ``bridge_src(X@i->Y@j)`` (partition i) /
   ``bridge_dst(X@i->Y@j)`` (partition j) pair — the only edges that cross partitions, so
   an engine running each partition in its own worker moves data only through bridges.
   A slice layer hands its part j to the consumer bound for partition j.

3. **Params** (bound by the net): replica 0 keeps a Param's name, replica i ≥ 1 gets the
   suffix ``@i``. Replicas of a layer partitioned on dimension 0 share the values of
   replica 0 (separate gradients, averaged by the servers over the replicas); replicas on
   dimension 1 own separate, smaller Params (kInnerProduct's outputs and the convolutions'
   filters are divided by the number of partitions).

Deviations from 0.3: a user's own kConcate layers keep direct ``@i`` edges (0.3 wired every
kConcate across partitions); partition dimensions other than 0 and 1 are a configuration
error; Params of replicas carry ``@i`` (0.3 repeated names and wrote one checkpoint file per
worker).
"""

from __future__ import annotations

from singa_core.contracts.errors import SingaError
from singa_core.contracts.names import replica_name, replica_param_name
from singa_core.netbuilder.specs import LayerSpec, layer_type_name, spec_location
from singa_core.schema import job_pb2


def partition(specs, phase, job, get_plugin, locate, *, num_partitions: int = 1, **_):
    """The graph transform: ``specs`` -> replicated specs with connection layers."""

    n = int(num_partitions)
    if n <= 1:
        return specs
    for spec in specs:
        if spec.conf.partition_dim not in (0, 1):
            raise SingaError(
                f"layer '{spec.conf.name}' has partition_dim {spec.conf.partition_dim}; with "
                f"{n} workers per group a layer is partitioned on dimension 0 (the batch) "
                "or 1 (the features)",
                where=spec_location(locate, spec, "partition_dim"),
                help="set partition_dim: 0 or 1 (or leave it to NetProto.partition_dim)",
            )

    def whole_source(conf) -> bool:
        try:
            cls = get_plugin("layer", layer_type_name(conf))
        except SingaError:
            return False
        return bool(getattr(cls, "needs_whole_source", False))

    def connection(name, type_, src_dim, **fields):
        conf = job_pb2.LayerProto(name=name, type=type_, partition_dim=src_dim)
        for key, value in fields.items():
            sub, _, attr = key.partition("__")
            setattr(getattr(conf, sub), attr, value)
        return conf

    # 1. connection layers on the configured net
    pdim = {s.conf.name: s.conf.partition_dim for s in specs}
    logical: list[tuple] = []  # (conf, conf_index, srcs, kind); kind "gather" for concates
    made: set[str] = set()  # connection layers already inserted (a source read twice)

    def add(conf, srcs, kind):
        if conf.name not in made:
            made.add(conf.name)
            logical.append((conf, None, srcs, kind))

    for spec in specs:
        srcs = []
        for src in spec.srcs:
            a, b = pdim[src], spec.conf.partition_dim
            if a == b and not (b == 1 and whole_source(spec.conf)):
                srcs.append(src)
                continue
            if b == 1 and whole_source(spec.conf):  # every partition gets all of src
                spread = connection(f"split({src})", job_pb2.kSplit, a, split_conf__num_splits=n)
            else:  # partition j gets part j of every partition's src
                spread = connection(
                    f"slice({src})",
                    job_pb2.kSlice,
                    a,
                    slice_conf__slice_dim=b,
                    slice_conf__num_slices=n,
                )
            concate = connection(
                f"concate({spread.name})",
                job_pb2.kConcate,
                b,
                concate_conf__concate_dim=a,
                concate_conf__num_concates=n,
            )
            add(spread, [src], "spread")
            add(concate, [spread.name], "gather")
            srcs.append(concate.name)
        logical.append((spec.conf, spec.conf_index, srcs, None))
    # connection layers must come before their consumers: keep the user's order otherwise
    ordered = _connections_first(logical)

    # 2. replicas and edges
    out = []
    for conf, index, srcs, kind in ordered:
        for i in range(n):
            c = job_pb2.LayerProto()
            c.CopyFrom(conf)
            c.name = replica_name(conf.name, i)
            c.partition_id, c.num_partitions = i, n
            for p in c.param:
                if p.name:
                    p.name = replica_param_name(p.name, i)
                if p.share_from:
                    p.share_from = replica_param_name(p.share_from, i)
            if kind == "gather":
                (src,) = srcs
                rsrcs, parts = [], {}
                for k in range(n):
                    if k == i:
                        rsrcs.append(replica_name(src, k))
                        parts[len(rsrcs) - 1] = i
                        continue
                    edge = f"{replica_name(src, k)}->{c.name}"
                    bsrc = job_pb2.LayerProto(
                        name=f"bridge_src({edge})", type=job_pb2.kBridgeSrc, partition_dim=0
                    )
                    bsrc.partition_id, bsrc.num_partitions = k, n
                    bdst = job_pb2.LayerProto(
                        name=f"bridge_dst({edge})", type=job_pb2.kBridgeDst, partition_dim=0
                    )
                    bdst.partition_id, bdst.num_partitions = i, n
                    out.append(LayerSpec(bsrc, None, [replica_name(src, k)], {0: i}))
                    out.append(LayerSpec(bdst, None, [bsrc.name]))
                    rsrcs.append(bdst.name)
                out.append(LayerSpec(c, index, rsrcs, parts))
            else:
                out.append(LayerSpec(c, index, [replica_name(s, i) for s in srcs]))
    return out


def _connections_first(logical):
    """Each inserted connection layer right before the layer that reads it."""
    by_name = {entry[0].name: entry for entry in logical}
    placed, ordered = set(), []

    def place(entry):
        if entry[0].name in placed:
            return
        if entry[3] is not None:  # an inserted layer: its own source first
            for s in entry[2]:
                if s in by_name and by_name[s][3] is not None:
                    place(by_name[s])
        placed.add(entry[0].name)
        ordered.append(entry)

    for entry in logical:
        if entry[3] is None:
            for s in entry[2]:
                if by_name[s][3] is not None:
                    place(by_name[s])
            place(entry)
    return ordered
