"""Image files in and out (Pillow, the optional ``singa-classic[images]`` extra).

Shared by the images converter (``singa data images``), kRecordInput with
``store_conf.encoded`` and kLMDBData's encoded Datums. Pillow is imported on first use; a
missing Pillow is a SingaError saying which extra to install.
"""

from __future__ import annotations

import io

import numpy as np

from singa_core.errors import SingaError

_PIL = None


def pil():
    """The ``PIL.Image`` module, or a SingaError naming the extra that brings it."""
    global _PIL
    if _PIL is None:
        try:
            from PIL import Image
        except ImportError:
            raise SingaError(
                "reading image files needs Pillow, which is not installed",
                help="pip install 'singa-classic[images]'",
            ) from None
        _PIL = Image
    return _PIL


def decode(buf: bytes, channels: int, order: str = "RGB") -> np.ndarray:
    """The JPEG/PNG/... file in ``buf`` as uint8 ``[C, H, W]``: 1 channel (grey-scale) or 3
    (colour planes in ``order``, "RGB" or Caffe's "BGR"). ValueError if it does not decode."""
    Image = pil()
    try:
        with Image.open(io.BytesIO(buf)) as img:
            img = img.convert("L" if channels == 1 else "RGB")
            arr = np.asarray(img, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"is not a readable image ({exc})") from None
    if channels == 1:
        return arr[None, :, :]
    if channels != 3:
        raise ValueError(f"cannot be decoded into {channels} channels (only 1 or 3)")
    chw = arr.transpose(2, 0, 1)
    if order == "BGR":
        chw = chw[::-1]
    return np.ascontiguousarray(chw)


def encode(chw: np.ndarray, fmt: str = "PNG", quality: int = 95) -> bytes:
    """uint8 ``[C, H, W]`` (C = 1 or 3, RGB) as a PNG or JPEG file."""
    Image = pil()
    arr = np.asarray(chw, dtype=np.uint8)
    img = Image.fromarray(arr[0] if arr.shape[0] == 1 else arr.transpose(1, 2, 0).copy())
    out = io.BytesIO()
    if fmt.upper() in ("JPEG", "JPG"):
        img.save(out, format="JPEG", quality=quality)
    else:
        img.save(out, format=fmt.upper())
    return out.getvalue()


_GREY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F", "P;L")


def decode_native(buf: bytes, order: str = "RGB") -> np.ndarray:
    """An image file in its own colours as uint8 ``[C, H, W]``: grey-scale images give one
    channel, all others three (in ``order``). ValueError if it does not decode."""
    Image = pil()
    try:
        with Image.open(io.BytesIO(buf)) as img:
            channels = 1 if img.mode in _GREY_MODES else 3
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"is not a readable image ({exc})") from None
    return decode(buf, channels, order)
