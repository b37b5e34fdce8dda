"""Net unrolling for recurrent nets (SINGA 0.3 §4 step 3, ``NeuralNet::Unrolling``).

A graph transform (see :data:`singa_core.netbuilder.net.GRAPH_TRANSFORMS`). When any layer
of a phase's net has ``unroll_len`` > 1 (its own, or NetProto's copied in by the phase filter),
every layer L with unroll length U becomes U layers named ``"i#L"`` (``i = 0 … U−1``) whose
``unroll_index`` is ``i``; the unroll fields and source lists are rebuilt here. A net in
which every layer has ``unroll_len`` 1 is left untouched (its layers keep their plain
names; the runtime names of its Params still carry ``0#`` in checkpoints).

Edges, for the k-th source S of L (connection type ``unroll_conn_type[k]``, default
``kUnrollOneToOne``, and ``shift[k]``, default 0):

* ``kUnrollOneToAll``: every ``i#L`` takes all unrolled copies of S, in order;
* ``kUnrollOneToOne``: ``i#L`` takes ``(i−shift)#S`` when ``i ≥ shift``;
* ``kUnrollFirstToLast``: only ``0#L`` takes the last copy of S;
* ``kUnrollCustomized``: no edge (as in 0.3).

A layer class with ``recurrent = True`` (kGRU) also takes ``(i−1)#L`` as an extra last
source for ``i ≥ 1``. Param names get the same prefix (``"i#w"``); the copies ``i ≥ 1`` of
a Param share the value *and* the gradient of ``0#w`` (the net binds them, see
``NeuralNet``), so a worker that runs backward with ``kAggGrad`` (kBPTT) accumulates the
whole window's gradient into one buffer and sends one update. A user's ``share_from`` stays
on the ``0#`` copy; its un-prefixed spelling (``"w1"``) is resolved to ``"0#w1"``.

Errors SINGA 0.3 did not catch (it indexed past the last copy or crashed) are reported
with the layer's location: a one-to-one edge to a source with fewer copies, and more
``unroll_conn_type``/``shift`` entries than sources.
"""

from __future__ import annotations

from singa_core.contracts.errors import SingaError
from singa_core.contracts.names import unrolled_name
from singa_core.netbuilder.specs import LayerSpec, layer_type_name, spec_location
from singa_core.schema import job_pb2

#: the most layer copies an unrolled net may have (SINGA's char-rnn: 6 layers x 50 steps);
#: building a net costs time and memory per copy, and 2**31 steps would never finish
MAX_UNROLLED_LAYERS = 2048

_CONN_HELP = {
    job_pb2.kUnrollOneToOne: "kUnrollOneToOne",
    job_pb2.kUnrollOneToAll: "kUnrollOneToAll",
    job_pb2.kUnrollFirstToLast: "kUnrollFirstToLast",
    job_pb2.kUnrollCustomized: "kUnrollCustomized",
}


def unroll(specs, phase, job, get_plugin, locate, **_):
    """The graph transform: ``specs`` (one per configured layer) -> unrolled specs."""

    if all(s.conf.unroll_len <= 1 for s in specs):
        for s in specs:
            _check_unroll_fields(s, locate)
        return specs
    length = {}
    for s in specs:
        _check_unroll_fields(s, locate)
        length[s.conf.name] = max(int(s.conf.unroll_len), 1)
    total = sum(length.values())
    if total > MAX_UNROLLED_LAYERS:
        big = max(specs, key=lambda s: length[s.conf.name])
        own = big.conf_index is not None and job.neuralnet.layer[big.conf_index].HasField(
            "unroll_len"
        )
        raise SingaError(
            f"unrolling makes {total:,} layers (at most {MAX_UNROLLED_LAYERS:,}): layer "
            f"'{big.conf.name}' has unroll_len {length[big.conf.name]:,}",
            where=spec_location(locate, big, "unroll_len")
            if own
            else locate("neuralnet.unroll_len"),
            help="unroll over fewer time steps (SINGA's char-rnn unrolls 50)",
        )

    out = []
    for spec in specs:
        conf, n = spec.conf, length[spec.conf.name]
        try:
            layer_cls = get_plugin("layer", layer_type_name(conf))
            recurrent = bool(getattr(layer_cls, "recurrent", False))
        except SingaError:
            recurrent = False  # an unknown type is reported when the layer is created
        conn = list(conf.unroll_conn_type)
        shift = list(conf.shift)
        for i in range(n):
            c = job_pb2.LayerProto()
            c.CopyFrom(conf)
            c.name = unrolled_name(i, conf.name)
            c.unroll_index = i
            for fieldname in ("unroll_len", "unroll_conn_type", "shift", "srclayers"):
                c.ClearField(fieldname)
            for p in c.param:
                if p.name:
                    p.name = unrolled_name(i, p.name)
                if i > 0:
                    p.ClearField("share_from")  # bound to 0#… (value and gradient) by the net
            srcs: list[str] = []
            for k, src in enumerate(spec.srcs):
                kind = conn[k] if k < len(conn) else job_pb2.kUnrollOneToOne
                s = shift[k] if k < len(shift) else 0
                m = length[src]
                if kind == job_pb2.kUnrollOneToAll:
                    srcs.extend(unrolled_name(j, src) for j in range(m))
                elif kind == job_pb2.kUnrollOneToOne:
                    if i - s >= m:
                        raise SingaError(
                            f"layer '{conf.name}' (unroll_len {n}) connects one-to-one to "
                            f"'{src}', which has only {m} unrolled cop{'y' if m == 1 else 'ies'}"
                            + (f" (shift {s})" if s else ""),
                            where=spec_location(locate, spec, f"srclayers[{k}]"),
                            help=f"give '{src}' unroll_len {n}, or connect to it with "
                            "`unroll_conn_type: kUnrollOneToAll` (one entry per source, in "
                            "order)",
                        )
                    if i >= s:
                        srcs.append(unrolled_name(i - s, src))
                elif kind == job_pb2.kUnrollFirstToLast:
                    if i == 0:
                        srcs.append(unrolled_name(m - 1, src))
                # kUnrollCustomized: no edge, as in 0.3
            if recurrent and i > 0:
                srcs.append(unrolled_name(i - 1, conf.name))
            out.append(LayerSpec(c, spec.conf_index, srcs))
    return out


def _check_unroll_fields(spec, locate) -> None:

    conf = spec.conf
    if conf.unroll_len < 1:
        raise SingaError(
            f"layer '{conf.name}' has unroll_len {conf.unroll_len}",
            where=spec_location(locate, spec, "unroll_len"),
            help="unroll_len is the number of time steps, at least 1",
        )
    for fieldname in ("unroll_conn_type", "shift"):
        values = list(getattr(conf, fieldname))
        if len(values) > len(spec.srcs):
            raise SingaError(
                f"layer '{conf.name}' has {len(values)} {fieldname} entries but "
                f"{len(spec.srcs)} source layer(s)",
                where=spec_location(locate, spec, f"{fieldname}[{len(spec.srcs)}]"),
                help=f"give at most one {fieldname} per srclayers entry, in the same order",
            )
    for k, s in enumerate(conf.shift):
        if s < 0:
            raise SingaError(
                f"layer '{conf.name}' has a negative shift ({s})",
                where=spec_location(locate, spec, f"shift[{k}]"),
                help="shift k connects copy i to the source's copy i−k; it must be ≥ 0",
            )
