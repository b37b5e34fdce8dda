"""job.conf in and out of text: parsing with located errors, ``-o`` overrides, SINGA 0.3's
legacy flags and ``singa.conf``.

* :mod:`.parse`: protobuf text -> ``singa.JobProto`` with ``FILE:LINE:COL`` errors and a
  locator for any field; ``-o FIELD=VALUE`` overrides;
* :mod:`.legacy`: SINGA 0.3's ``-conf``/``-resume``/``-test`` flags and cluster settings.

Imports only :mod:`singa_core.contracts` and :mod:`singa_core.schema`.
"""
