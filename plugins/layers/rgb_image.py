"""kRGBImage: the deprecated 0.1-style image parser layer (SINGA 0.3 §2.2,
input_layer/deprecated.cc).

``srclayers = [a kShardData layer]`` whose records are ``[C, H, W]`` images (the first
record's ``shape``; every record holds ``C·H·W`` values: ``pixel`` bytes, or ``data``
floats when it has no pixels). Configured by ``rgbimage_conf {scale, cropsize, mirror,
meanfile}``. Per image:

1. ``x ← x − mean`` with the per-pixel mean of ``meanfile`` (none if unset): a serialized
   CaffeBlob when the path contains "binaryproto", else a serialized RecordProto whose
   ``data`` is the mean — the whole file (0.1's image_mean.bin) or the first tuple of a
   kvfile store (0.3's, e.g. from ``singa data cifar10``);
2. training (phase has kTrain): a random ``cropsize`` crop at ``h ~ U{0..H−crop}``,
   ``w ~ U{0..W−crop}`` and, with ``mirror``, a horizontal flip with probability 1/2 (from
   ``ctx.rng``); otherwise the central crop, no flip;
3. ``x ← x · scale``.

``data`` is ``[batch, C, crop, crop]`` (``[batch, C, H, W]`` without a crop). No labels
(use kLabel), no gradient.

Differences from 0.3: outside training 0.3 did not crop at all and copied the whole image
into the smaller cropped buffer (overrunning it); singa takes the central crop. 0.3 drew
the crop offsets from ``U{0..C−crop}`` (the record's first dimension, channels) and sized
the mean as the *cropped* image; singa uses ``U{0..H−crop}`` and a full ``C·H·W`` mean
subtracted before cropping. Flips have probability exactly 1/2. ``scale: 0`` is an error
(0.3 skipped the scaling). A kvfile-store mean file is accepted (an extension).
"""

from __future__ import annotations

import math

import numpy as np
from singa_builtins.layers._records import (
    bad_record_maker,
    crop_scale_onnx,
    deploy_sample_shape,
    fill_rows,
    image_cropper,
    load_mean_file,
    record_source,
)

from singa_core.layer import InputLayer, kDeploy, kTrain


class RGBImageLayer(InputLayer):
    type_names = ("kRGBImage",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (1, 1)
    deploy_role = "input"  # predicting: fed raw C×H×W pixels, then mean, central crop, scale

    def setup(self, srcs):
        if self.ctx.phase & kDeploy:
            shape = list(deploy_sample_shape(self, "3, 32, 32"))
            if len(shape) != 3:
                raise self.error(
                    f"layer '{self.name}' (kRGBImage) parses [channels, height, width] "
                    f"images; the sample shape {shape} is not one",
                    field="srclayers",
                    help="give three numbers: --sample-shape 3 --sample-shape 32 --sample-shape 32",
                )
            self._setup_images(shape, int(self.ctx.batchsize))
            return
        src = record_source(self, srcs)
        sample = src.sample()
        shape = [int(s) for s in sample.shape]
        count = len(sample.pixel) or len(sample.data)
        if len(shape) != 3 or min(shape) <= 0 or math.prod(shape) != count:
            raise self.error(
                f"layer '{self.name}': the first record of '{src.path}' (shape {shape}, "
                f"{count} values) is not a [channels, height, width] image",
                field="srclayers",
                help="kRGBImage parses records whose shape is [C, H, W], e.g. [3, 32, 32]",
            )
        self._setup_images(shape, int(src.batchsize))

    def _setup_images(self, shape, b: int) -> None:
        c, h, w = shape
        self.image_shape = (c, h, w)
        self.cropper = image_cropper(self, h, w)
        self.batchsize = b
        crop = self.cropper.crop
        self.alloc([b, c, crop, crop] if self.cropper.cropping else [b, c, h, w], grad=False)
        self._full = np.zeros((b, c * h * w), dtype=np.float32)
        self.mean = self._load_mean(c * h * w)

    def _load_mean(self, size: int) -> np.ndarray | None:
        path = self.conf.rgbimage_conf.meanfile
        if not path:
            return None
        try:
            mean = load_mean_file(path)
        except OSError as exc:
            raise self.error(
                f"layer '{self.name}': cannot read meanfile '{path}': {exc.strerror or exc}",
                field="rgbimage_conf",
                help="check the path (relative paths start at the current directory); "
                "`singa data cifar10` writes image_mean.bin",
            ) from None
        except ValueError as exc:
            raise self.error(
                f"layer '{self.name}': cannot read meanfile '{path}': {exc}",
                field="rgbimage_conf",
                help="check the meanfile path: a BlobProto with one mean value per pixel",
            ) from None
        if mean.size != size:
            raise self.error(
                f"layer '{self.name}': meanfile '{path}' holds {mean.size} values, expected "
                f"{size} (one per pixel of a {list(self.image_shape)} image)",
                field="rgbimage_conf",
                help="give the mean file of this image size, or fix rgbimage_conf's cropsize",
            )
        return mean

    def sample_shape(self):
        return self.image_shape

    def feed(self, values):
        full = self._full
        np.copyto(full, values.reshape(full.shape))
        if self.mean is not None:
            full -= self.mean
        images = full.reshape(self.batchsize, *self.image_shape)
        self.cropper(images, self.data, False, self.ctx.rng)

    def to_onnx(self, g, inputs):
        x = inputs[0]
        if self.mean is not None:
            mean = g.const(self.mean.reshape(self.image_shape), f"{self.name}/mean")
            x = g.add("Sub", [x, mean], name=f"{self.name}/-mean")
        return crop_scale_onnx(g, x, self.cropper, self.name)

    def forward(self, phase, srcs):
        src = srcs[0]
        full = self._full
        fill_rows(full, src.records(), bad_record_maker(self, src))
        if self.mean is not None:
            full -= self.mean
        images = full.reshape(self.batchsize, *self.image_shape)
        self.cropper(images, self.data, bool(phase & kTrain), self.ctx.rng)
