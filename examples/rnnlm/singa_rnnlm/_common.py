"""What the four rnnlm layers share: reading their proto extension, locating errors at it,
and the time window handed from layer to layer.

The rnnlm layers are not unrolled (the job uses kBP, as 0.3's did): each layer's arrays
have one row per time slot of a window, ``max_window + 1`` rows, and every layer has a
``window`` attribute, the number of slots that hold inputs this step (0.3's
``RNNLayer::window()``). kData sets it when it reads a window of words; the layers above
copy it from their first source in ``forward``.
"""

from __future__ import annotations

from singa_core.errors import SingaError
from singa_core.layer import Layer


def extension(layer: Layer, ext, what: str, example: str):
    """The layer's ``[what]`` extension message; an error at the layer when it is absent."""
    if not layer.conf.HasExtension(ext):
        raise layer.error(
            f"layer '{layer.name}' ({layer.type_names[0]}) needs its [{what}] block",
            help=f"add `[{what}] {{ {example} }}` to the layer",
        )
    return layer.conf.Extensions[ext]


def extension_location(layer: Layer, what: str):
    """Where the layer's ``[what]`` block is in job.conf (the layer itself when the block is
    written under another spelling, e.g. its full name)."""
    try:
        return layer.ctx.locate(f"[{what}]")
    except ValueError:  # a core that cannot parse extension paths: point at the layer
        return layer.ctx.locate(None)


def error_at(layer: Layer, what: str, message: str, help: str | None = None) -> SingaError:
    """A SingaError located at the layer's ``[what]`` block."""
    return SingaError(message, where=extension_location(layer, what), help=help)


def window_source(layer: Layer, src: Layer) -> Layer:
    """``src``, checked to be an rnnlm layer that says how long its window is."""
    if not hasattr(src, "window"):
        raise layer.error(
            f"layer '{layer.name}' ({layer.type_names[0]}) reads windows of words, but its "
            f"source '{src.name}' ({type(src).__name__}) is not an rnnlm layer",
            field="srclayers",
            help="its first source must be kData, kEmbedding or kHidden (as in "
            "examples/rnnlm/job.conf)",
        )
    return src
