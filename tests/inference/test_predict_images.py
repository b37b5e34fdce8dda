"""Your own images end to end: `singa data images` -> `singa train` -> `singa predict` on
image files prints the class folders' names (labels.txt beside the job.conf). The job has
no test data, so its deploy net comes from the training net."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_singa

from singa_core import Job


@pytest.mark.slow
def test_image_folder_to_named_predictions(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    for cls, base in (("cat", 40), ("dog", 200)):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        for i in range(12):
            pixels = rng.normal(base, 20, (16, 16, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / "photos" / cls / f"{i}.png")
    out = tmp_path / "data"
    res = run_singa("data", "images", str(tmp_path / "photos"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    res = run_singa("train", str(out / "job.conf"), "-q", "-o", "train_steps=30", "--seed", "2")
    assert res.returncode == 0, res.stderr

    model = Job.from_file(out / "job.conf").model()
    assert model.plan.inputs == ["data"] and model.sample_shape == (3, 16, 16)
    files = [tmp_path / "photos" / c / f"{i}.png" for c in ("cat", "dog") for i in (0, 1)]
    res = run_singa("predict", str(out / "job.conf"), *map(str, files), "--top-k", "2")
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()[1:]
    assert [r.split()[1] for r in rows] == ["cat", "cat", "dog", "dog"], res.stdout
    preds = tmp_path / "p.jsonl"
    res = run_singa("predict", str(out / "job.conf"), *map(str, files), "--output", str(preds))
    assert res.returncode == 0, res.stderr
    top = [json.loads(line)["top"][0][0] for line in preds.read_text().splitlines()]
    assert top == ["cat", "cat", "dog", "dog"]
