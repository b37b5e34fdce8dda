"""What a safetensors export says about its tensors, so other tools can use them.

* ``describe_params(model)``: for every Param of the deploy net, the layer that owns it,
  that layer's type (as job.conf names it), the Param's shape, and the shapes (without the
  batch axis) the layer takes and gives: e.g. a convolution's weight ``(F, C·kh·kw)`` with
  its input ``(C, H, W)``, or the inner product after a convolution whose input ``(C, H, W)``
  it reads flattened in that (row-major) order;
* ``preprocessing(job)``: the data layers' mean and std as stored in their ``mean_file`` /
  ``std_file`` (a record store of one RecordProto, as ``singa data cifar10`` writes
  ``image_mean.bin``), shaped like a sample, and the constants ``mean_value`` /
  ``std_value``: inputs are ``(x − mean) / std`` before the first layer;
* ``class_names(job_path)``: the lines of ``labels.txt`` beside the job.conf.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def describe_params(model) -> dict[str, dict]:
    """Param name (as stored) -> {layer, type, shape, layer_input, layer_output}."""
    from singa_core.contracts.names import plain_param_name
    from singa_core.netbuilder.specs import layer_type_name

    net = model.net
    out: dict[str, dict] = {}
    for layer in net.layers:
        srcs = net.srclayers(layer)
        for p in layer.params:
            name = plain_param_name(p.name)
            if name in out:
                continue  # a shared Param: described at its first owner
            out[name] = {
                "layer": layer.name,
                "type": layer_type_name(layer.conf) if layer.conf is not None else "",
                "shape": [int(s) for s in p.value.shape],
                "layer_input": [
                    [int(s) for s in src.data.shape[1:]] for src in srcs if src.data is not None
                ],
                "layer_output": (
                    [int(s) for s in layer.data.shape[1:]] if layer.data is not None else []
                ),
            }
    return out


def _first_record_values(path: str, backend: str, get_plugin) -> np.ndarray | None:
    from singa_core.schema import common_pb2

    store = get_plugin("store", backend or "kvfile")()
    store.open(str(path), 1)  # KREAD
    try:
        rec = store.read()
    finally:
        store.close()
    if rec is None:
        return None
    msg = common_pb2.RecordProto()
    msg.ParseFromString(rec[1])
    if len(msg.data):
        return np.asarray(msg.data, dtype=np.float32)
    if msg.pixel:
        return np.frombuffer(msg.pixel, dtype=np.uint8).astype(np.float32)
    return None


def preprocessing(job, get_plugin) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """(tensors ``preprocess/<layer>/mean`` and ``/std`` read from the data layers' files,
    constants per layer ``{"mean_value": .., "std_value": ..}``), from the layers included
    in the test phase (else every phase)."""
    from singa_core.schema import job_pb2

    tensors: dict[str, np.ndarray] = {}
    constants: dict[str, dict] = {}
    for layer in job.neuralnet.layer:
        if not layer.HasField("store_conf") or len(layer.srclayers):
            continue
        if layer.include and job_pb2.kTest not in layer.include:
            continue
        conf = layer.store_conf
        shape = tuple(int(s) for s in conf.shape)
        for field in ("mean_file", "std_file"):
            path = getattr(conf, field)
            if not path or not Path(path).is_file() and not Path(path).is_dir():
                continue
            try:
                values = _first_record_values(path, conf.backend, get_plugin)
            except Exception:  # an unreadable file only leaves the tensor out
                values = None
            if values is None:
                continue
            if shape and values.size == math.prod(shape):
                values = values.reshape(shape)
            tensors[f"preprocess/{layer.name}/{field.split('_')[0]}"] = values
        consts = {
            f: float(getattr(conf, f)) for f in ("mean_value", "std_value") if conf.HasField(f)
        }
        if consts:
            constants[layer.name] = consts
    return tensors, constants


def class_names(job_path) -> list[str] | None:
    """The class names in ``labels.txt`` beside the job.conf (line i: class i), if any."""
    if not job_path:
        return None
    path = Path(job_path).parent / "labels.txt"
    try:
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None
