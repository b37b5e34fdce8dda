"""pytest fixtures of the plugin author's kit (registered as the ``pytest11`` entry point
``singa``, so they are available in any test suite once singa-classic is installed).

* ``singa_check_layer``, ``singa_check_updater``, ``singa_check_worker``: the contract
  checks of :mod:`singa_core.testing`;
* ``singa_run_job``: :func:`~singa_core.testing.run_job` with the test's ``tmp_path`` as its
  folder (``singa_run_job(conf_text, "-o", "train_steps=20")``);
* ``singa_blobs``: the path of a small CSV dataset in ``tmp_path``
  (:func:`~singa_core.testing.blobs_csv`), for :func:`~singa_core.testing.mlp_job`;
* ``singa_gradient_checker``: a default :class:`~singa_core.testing.GradientChecker`.

Imports are deferred to the fixtures, so loading this plugin costs nothing in test runs
that do not use them.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def singa_check_layer():
    from singa_core.testing.layers import check_layer

    return check_layer


@pytest.fixture
def singa_check_updater():
    from singa_core.testing.updaters import check_updater

    return check_updater


@pytest.fixture
def singa_check_worker():
    from singa_core.testing.workers import check_worker

    return check_worker


@pytest.fixture
def singa_gradient_checker():
    from singa_core.testing.gradcheck import GradientChecker

    return GradientChecker()


@pytest.fixture
def singa_run_job(tmp_path):
    from singa_core.testing.jobs import run_job

    counter = iter(range(1_000_000))

    def run(conf: str, *args: str, check: bool = True):
        return run_job(conf, tmp_path / f"job{next(counter)}", *args, check=check)

    return run


@pytest.fixture
def singa_blobs(tmp_path):
    from singa_core.testing.jobs import blobs_csv

    return blobs_csv(tmp_path / "blobs.csv")
