"""kImagePreprocess: crop, mirror and scale a batch of images (SINGA 0.3 §2.2,
input_layer/image_preprocess.cc).

``srclayers = [images]``, a 4-D ``[N, C, H, W]`` source with ``H == W``; configured by
``rgbimage_conf {scale, cropsize, mirror}`` (``meanfile`` is ignored, as in 0.3: subtract
the mean in the source, e.g. kRecordInput's ``mean_file``). ``data`` is
``[N, C, crop, crop]`` when ``cropsize`` is set and differs from ``H``, else ``[N, C, H, W]``.

* training (phase has kTrain): per image, offsets ``h, w ~ U{0..H−crop}`` and, with
  ``mirror``, a horizontal flip with probability 1/2, drawn from ``ctx.rng``;
* otherwise the central crop, offsets ``((H−crop)//2, (W−crop)//2)``, no flip;
* then ``out = in · scale``.

When its source prefetches (kRecordInput with ``store_conf.prefetching``), the crop and
mirror of each batch are made by the source's prefetch thread with the batch (same random
draws, see ``_prefetch``), and forward copies them.

It is an input-category layer: it sends no gradient to its source and provides no labels
(loss layers take them from the input layer).

Differences from 0.3: outside training 0.3 crops the top-left corner (offset (0, 0)) although
its docs say "central part"; singa takes the central crop. 0.3 decided the flip from
``U{0..H−crop} % 2`` (probability slightly off 1/2 for odd ranges); singa flips with
probability exactly 1/2. ``scale: 0`` is a configuration error. Without a crop 0.3 scaled
its source's data in place (it shared the buffer); singa writes its own ``data``.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._records import crop_scale_onnx, image_cropper

from singa_core.layer import InputLayer, kTrain


class ImagePreprocessLayer(InputLayer):
    type_names = ("kImagePreprocess",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (1, 1)
    deploy_role = "keep"  # predicting: the central crop and the scale, as in testing

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = srcs[0]
        shape = tuple(src.data.shape) if src.data is not None else ()
        if len(shape) != 4 or shape[2] != shape[3]:
            raise self.error(
                f"layer '{self.name}' (kImagePreprocess) needs a source of square images "
                f"[N, C, H, W] with H == W, but '{src.name}' has shape {list(shape)}",
                field="srclayers",
                help="give the input layer a 3-D store_conf.shape such as `shape: 3 shape: 32 "
                "shape: 32`",
            )
        n, c, h, w = shape
        self.cropper = image_cropper(self, h, w)
        crop = self.cropper.crop
        self.alloc([n, c, crop, crop] if self.cropper.cropping else shape, grad=False)
        self._prepared = None
        attach = getattr(src, "attach_stage", None)
        self.staged = bool(attach(self)) if callable(attach) else False

    # -- as a stage of a prefetching input layer -------------------------------------------
    def stage_apply(self, phase, images, rng):
        """This layer's work on the source batch ``images``, done by the source's producer
        (possibly a batch ahead, in its thread) with ``rng`` in place of ``ctx.rng``."""
        out = np.empty_like(self.data)
        self.cropper(images, out, bool(phase & kTrain), rng)
        return out

    def stage_take(self, out) -> None:
        self._prepared = out

    def to_onnx(self, g, inputs):
        return crop_scale_onnx(g, inputs[0], self.cropper, self.name)

    def forward(self, phase, srcs):
        prepared, self._prepared = self._prepared, None
        if prepared is not None:  # made with the batch by the prefetching source
            self.data[...] = prepared
            return
        self.cropper(srcs[0].data, self.data, bool(phase & kTrain), self.ctx.rng)
