"""examples/rnnlm: SINGA 0.3's own user-extension example, a plugin package installed for real.

The package is copied, its proto extension compiled with ``singa compile-proto`` and
pip-installed into a target folder, exactly as a user would; its own tests run against the
installed copy; ``singa data rnnlm-shakespeare`` makes the corpus; 0.3's job.conf (paths
pointed at that corpus) trains until the perplexity on the held-out text falls.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_singa
from plugin_package import install_package_dir

EXAMPLE = REPO / "examples" / "rnnlm"
CI_STEPS = 16_271  # two validation intervals (8135), validated after each and at the end


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("rnnlm")
    return root, install_package_dir(EXAMPLE, root)


@pytest.fixture(scope="module")
def corpus(installed, data_dir, tmp_path_factory):
    """The converted corpus folder and what the converter printed."""
    out = tmp_path_factory.mktemp("rnnlm-data")
    env = {"PYTHONPATH": str(installed[1])}
    res = run_singa(
        "data", "rnnlm-shakespeare", "--out", str(out), "--from",
        str(data_dir / "tinyshakespeare"), env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return out, res.stderr


def env_of(installed):
    return {"PYTHONPATH": str(installed[1])}


@pytest.mark.slow
def test_the_package_tests_pass_against_the_installed_copy(installed):
    root, site = installed
    tests = root / EXAMPLE.name / "tests"
    res = subprocess.run(
        # -P: the package folder is not put on sys.path, so the installed copy is imported
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"\b2\d passed", res.stdout), res.stdout
    assert str(site) in subprocess.run(
        [sys.executable, "-P", "-c", "import singa_rnnlm; print(singa_rnnlm.__file__)"],
        cwd=root, env={"PYTHONPATH": str(site)}, capture_output=True, text=True,
    ).stdout  # fmt: skip


def test_listed_as_user_types_next_to_the_builtin_embedding(installed):
    data = json.loads(run_singa("list-plugins", "--json", env=env_of(installed)).stdout)
    plugins = {p["name"]: p for p in data["plugins"]}
    rnnlm = plugins["singa-rnnlm"]
    assert rnnlm["types_by_field"]["layer"] == {
        "user_type": ["kData", "kEmbedding", "kHidden", "kLoss"]
    }
    assert rnnlm["types"]["dataset"] == ["rnnlm", "rnnlm-shakespeare"]
    assert set(rnnlm["requires"].split(",")) == {">=0.1", "<1"}  # its dependency range
    assert rnnlm["plugin_api"] == ">=1,<2"  # SINGA_PLUGIN_API in singa_rnnlm/plugin.py
    assert "kEmbedding" in plugins["singa-classic"]["types_by_field"]["layer"]["type"]


def test_the_corpus_has_the_size_of_0_3s(corpus):
    out, log = corpus
    assert "vocabulary: 3720 words (vocab_size), 100 classes (nclass)" in log
    assert re.search(r"\(10,000 sentences, [\d,]+ windows of 10\) to .*train_data\.bin", log)
    assert re.search(r", 683 windows of 10\) to .*valid_data\.bin", log)
    for name in ("train_data.bin", "valid_data.bin", "test_data.bin", "vocab.txt"):
        assert (out / name).stat().st_size > 0


def job_text(out) -> str:
    """0.3's job.conf with its data paths pointed at the converted corpus."""
    text = (EXAMPLE / "job.conf").read_text()
    for name in ("train_data.bin", "valid_data.bin"):
        assert text.count(f'path: "examples/rnnlm/{name}"') == 1
        text = text.replace(f'"examples/rnnlm/{name}"', f'"{out / name}"')
    return text


@pytest.mark.slow
def test_trains_until_the_held_out_perplexity_falls(installed, corpus, tmp_path):
    out, log = corpus
    unigram = float(re.search(r"valid_data\.bin; unigram perplexity ([\d.]+)", log).group(1))
    conf = tmp_path / "job.conf"
    conf.write_text(job_text(out))
    ws = tmp_path / "ws"
    args = ["-o", f"cluster.workspace={ws}", "-o", f"train_steps={CI_STEPS}", "--seed", "0"]
    dry = run_singa("train", str(conf), "--dry-run", *args, env=env_of(installed))
    assert dry.returncode == 0, dry.stderr
    for line in ("embedding  kEmbedding", "hidden     kHidden", "loss       kLoss"):
        assert line in dry.stdout
    res = run_singa("train", str(conf), *args, env=env_of(installed))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    val = {m["step"]: m["ppl"] for m in lines if m.get("phase") == "validation"}
    # validated every 8135 steps, and once more at the last step (a singa addition)
    assert sorted(val) == [0, 8135, 16270, CI_STEPS], val
    start, end = val[0], val[CI_STEPS]
    print(f"held-out perplexity: {start:.1f} at step 0, {end:.1f} at step {CI_STEPS}")
    assert end < 0.6 * start, val
    assert end < unigram, (val, unigram)  # better than the training unigram distribution
    assert val[8135] > end  # still falling


@pytest.mark.slow
def test_resume_continues_exactly(installed, corpus, tmp_path):
    """The kData cursor and slot 0 are checkpointed: stopping and resuming mid-corpus gives
    the same parameters as an uninterrupted run."""
    conf = tmp_path / "job.conf"
    conf.write_text(job_text(corpus[0]))
    env = env_of(installed)

    def train(ws, steps, *extra):
        args = ["-o", f"cluster.workspace={ws}", "-o", f"train_steps={steps}"]
        res = run_singa("train", str(conf), "-q", *args, "-o", "validate_freq=0", "--seed", "3",
                        *extra, env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr

    train(tmp_path / "a", 1500)
    train(tmp_path / "b", 737)
    train(tmp_path / "b", 1500, "--resume")
    straight = (tmp_path / "a" / "checkpoint" / "step1500-worker0").read_bytes()
    assert (tmp_path / "b" / "checkpoint" / "step1500-worker0").read_bytes() == straight
