"""`cd examples/mnist && singa train job.conf`: the relative store paths start from the
folder singa runs in, so they are missing there; the error says which folder has them
(issue 31: it said to run `singa data mnist`, though the data existed)."""

from __future__ import annotations

from pathlib import Path

from conftest import mlp_conf, run_singa, write_csv_blobs


def _layout(tmp_path: Path) -> Path:
    folder = tmp_path / "examples" / "blobs"
    folder.mkdir(parents=True)
    write_csv_blobs(folder / "blobs.csv")
    conf = folder / "job.conf"
    text = mlp_conf(Path("examples/blobs/blobs.csv"), tmp_path / "ws", steps=2)
    conf.write_text(text.replace("test_steps: 5", "test_steps: 0"))
    return conf


def test_a_job_run_from_its_own_folder_is_told_where_to_run(tmp_path):
    conf = _layout(tmp_path)
    res = run_singa("train", "job.conf", "--dry-run", cwd=conf.parent)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr
    assert "job.conf:" in err and "examples/blobs/blobs.csv is not there from" in err
    assert f"but is from {tmp_path}" in err and "start from the folder singa runs in" in err
    assert f"help: run singa from {tmp_path} (cd ../..)" in err
    assert "blobs.csv or " in err and "singa data" not in err and "Traceback" not in err
    # from the folder the paths start from, it runs
    res = run_singa("train", str(conf.relative_to(tmp_path)), "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_missing_everywhere_absolute_or_an_output_path_is_left_alone(tmp_path):
    from singa_core.jobconf.parse import parse_job_text
    from singa_core.jobconf.paths import check_working_folder

    conf = _layout(tmp_path)
    text = conf.read_text()
    here = conf.parent
    check_working_folder(parse_job_text(text, str(conf)), cwd=tmp_path)  # found from here
    nowhere = text.replace("blobs.csv", "nowhere.csv")  # the reader's own error says it
    check_working_folder(parse_job_text(nowhere, str(conf)), cwd=here)
    absolute = text.replace('"examples/blobs', f'"{tmp_path}/examples/blobs')
    check_working_folder(parse_job_text(absolute, str(conf)), cwd=here)
    # a layer with sources (an output writer) names a file it makes, not an input
    writer = absolute.replace(
        '  layer { name: "loss"',
        '  layer { name: "out" type: kCSVOutput srclayers: "ip2" '
        'store_conf { backend: "textfile" path: "examples/blobs/blobs.csv" } }\n'
        '  layer { name: "loss"',
    )
    assert writer != absolute
    check_working_folder(parse_job_text(writer, str(conf)), cwd=here)


def test_paths_no_filesystem_takes_are_left_alone(tmp_path):
    from singa_core.jobconf.parse import parse_job_text
    from singa_core.jobconf.paths import check_working_folder

    conf = _layout(tmp_path)
    for bad in ("x" * 5000, "a\\0b"):
        text = conf.read_text().replace("examples/blobs/blobs.csv", bad)
        check_working_folder(parse_job_text(text, str(conf)), cwd=conf.parent)
