"""Fusion across an edge of a built net, decided once per net (the last step of
:meth:`NeuralNet.create <singa_core.netbuilder.net.NeuralNet.create>`).

**Bias into the consumer.** A producer offering its bias (a
:class:`~singa_core.contracts.layer.DefersBias` layer: kInnerProduct) and a consumer that
can add it in its own first launch (an :class:`~singa_core.contracts.layer.AbsorbsBias`
layer: the activations, the softmax loss) are paired when

* the producer is the consumer's first source (its only one, or the logits of a loss
  whose second source gives the labels) and no other layer of the net reads the producer
  (no split layer, bridge, device transfer, second source list or second mention);
* both compute on the same device, and it is not the host: on the CPU nothing changes
  (numpy's two steps cost the same fused or not), on a GPU the add and the activation
  become one launch;
* both are in one partition and neither is an unrolled copy (``i#L``: those may run
  together as a sequence, :mod:`singa_core.contracts.sequences`);
* the bias is one value per column of the producer's C-contiguous ``data``.

The pass sets the producer's ``deferred_bias`` and the consumer's ``absorbed_bias`` to the
Param; after the consumer's forward the producer's ``data`` holds exactly what it held
unfused (the numeric guard, ``singa time`` and every later reader see the same arrays).
It names no layer type: any plugin may offer or absorb a bias through the same protocol.
"""

from __future__ import annotations

from singa_core.contracts.layer import AbsorbsBias, DefersBias, Layer
from singa_core.contracts.names import split_unrolled_name


def fuse_biases(net) -> list[tuple[str, str]]:
    """Pair producers deferring their bias with consumers absorbing it (see the module
    doc); returns the ``(producer, consumer)`` names paired."""
    readers: dict[int, list[Layer]] = {}
    for layer in net.layers:
        for src in net.srclayers(layer):
            readers.setdefault(id(src), []).append(layer)
    fused = []
    for consumer in net.layers:
        if not isinstance(consumer, AbsorbsBias) or consumer.absorbed_bias is not None:
            continue
        srcs = net.srclayers(consumer)
        if not srcs or not isinstance(srcs[0], Layer):
            continue
        producer = srcs[0]
        if not isinstance(producer, DefersBias) or producer.deferred_bias is not None:
            continue
        if readers.get(id(producer)) != [consumer]:
            continue
        device = producer.device
        if device.is_host or consumer.device != device:
            continue
        if producer.conf.partition_id != consumer.conf.partition_id or any(
            split_unrolled_name(la.name)[0] is not None for la in (producer, consumer)
        ):
            continue
        bias = producer.bias_to_defer()
        data, value = producer.data, getattr(bias, "value", None)
        if value is None or data is None or consumer.data is None:
            continue
        if not data.flags.c_contiguous or tuple(value.shape) != tuple(data.shape[-1:]):
            continue
        producer.deferred_bias = consumer.absorbed_bias = bias
        fused.append((producer.name, consumer.name))
    return fused
