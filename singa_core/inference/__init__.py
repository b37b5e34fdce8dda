"""Using a trained model: predicting and exporting through the deploy net.

* :mod:`.model`: :class:`~.model.Model` (``job.model()``): the deploy net
  (:mod:`singa_core.netbuilder.deploy`) with the Params of a checkpoint; ``predict`` on raw
  samples at any batch size, ``predict_classes``;
* :mod:`.inputs`: what ``singa predict`` reads (image files, ``.npy``/``.npz`` arrays, SINGA
  stores) and the tables and files it writes;
* :mod:`.onnx_export` and :mod:`.safetensors_export`: ``singa export``.

Imports the rooms below it (contracts, schema, plugin_host, jobconf, netbuilder, running);
never the commands. Optional libraries (Pillow, onnx, safetensors) only inside the
functions that need them.
"""
