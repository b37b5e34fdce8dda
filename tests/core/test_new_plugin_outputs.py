"""`singa new-plugin --out X` where X cannot hold a package folder (issue 38 point 4): a file,
a FIFO, /dev/null, a link to a file, a read-only folder, a full disk, a name too long. Each
is a located exit 2 with a `help:` line and no traceback; X is left as it was and nothing
of the package is left behind."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from singa_core.commands import scaffold
from singa_core.commands.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _refused(res, where: str) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    first = res.output.splitlines()[0]
    assert first.startswith(f"{where}: error: "), res.output
    assert "\nhelp: " in res.output
    return res.output


def _new_plugin(out) -> object:
    return runner.invoke(app, ["new-plugin", "foo", "--kind", "layer", "--out", str(out)])


def _planted(tmp_path: Path) -> dict[str, Path]:
    f = tmp_path / "afile"
    f.write_text("keep me\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(f)
    return {"file": f, "fifo": fifo, "link": link}


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("file", "it is a file, not a folder"),
        ("fifo", "it is a named pipe"),
        ("link", "it is a file, not a folder"),
        ("devnull", "it is a device"),
        ("under_file", "its parent"),
    ],
)
def test_an_out_that_is_not_a_folder_is_refused(tmp_path, monkeypatch, target, said):
    monkeypatch.chdir(tmp_path)
    planted = _planted(tmp_path)
    out = {
        "devnull": Path("/dev/null"),
        "under_file": planted["file"] / "sub",
    }.get(target) or planted[target]
    before = sorted(p.name for p in tmp_path.iterdir())
    text = _refused(_new_plugin(out), str(out))
    assert said in text
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created
    assert planted["file"].read_text() == "keep me\n"
    assert stat.S_ISFIFO(os.stat(planted["fifo"]).st_mode)
    assert planted["link"].is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("where", ["out", "name"])
def test_a_name_too_long_is_refused(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    long = "x" * 300
    if where == "out":
        res = _new_plugin(tmp_path / long)
    else:
        res = runner.invoke(app, ["new-plugin", long, "--kind", "layer", "--out", str(tmp_path)])
    text = _refused(res, str(tmp_path / long) if where == "out" else str(tmp_path))
    assert "too long for the filesystem" in text
    assert list(tmp_path.iterdir()) == []


def test_a_failing_write_leaves_nothing_behind(tmp_path, monkeypatch):
    """ENOSPC on the fifth file: no half package, and no folder of --out created for it."""
    calls = []
    real = os.fsync

    def full(fd):
        calls.append(fd)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "new" / "plugins"
    text = _refused(_new_plugin(out), str(out))
    assert "No space left on device" in text
    assert list(tmp_path.iterdir()) == []  # new/plugins removed again


def test_an_interrupt_while_writing_leaves_nothing_behind(tmp_path, monkeypatch):
    calls = []
    real = os.fsync

    def interrupted(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(fd)

    monkeypatch.setattr(os, "fsync", interrupted)
    (tmp_path / "out").mkdir()
    with pytest.raises(KeyboardInterrupt):
        scaffold.new_plugin("foo", "layer", tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_the_package_appears_whole_in_an_empty_folder_of_its_name(tmp_path):
    (tmp_path / "singa-foo").mkdir()
    res = _new_plugin(tmp_path)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "singa-foo" / "pyproject.toml").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["singa-foo"]  # no temp folder left


def test_read_only_and_full_filesystems(tmp_path):
    """Real ones: a read-only tmpfs and a 16 KiB tmpfs (the package is about 30 KB), mounted
    privately. Root ignores a folder's mode bits, so a read-only mount is the test."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount small filesystems privately")
    ro, full = tmp_path / "ro", tmp_path / "full"
    ro.mkdir()
    full.mkdir()
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from singa_core.commands.cli import app\n"
        "for out in sys.argv[1:]:\n"
        "    args = ['new-plugin', 'foo', '--kind', 'layer', '--out', out]\n"
        "    res = CliRunner().invoke(app, args)\n"
        "    print(res.exit_code)\n"
        "    print(res.output, end='')\n"
        "    import os\n"
        "    print('LEFT', sorted(os.listdir(out)))\n"
    )
    script = (
        f"mount -t tmpfs -o ro,size=64k tmpfs {ro} && "
        f"mount -t tmpfs -o size=16k tmpfs {full} && "
        f'exec {sys.executable} -c "$0" {ro} {full}'
    )
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, code],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "Traceback" not in out + res.stderr
    ro_part, full_part = out.split("LEFT")[0], out.split("LEFT")[1]
    assert ro_part.startswith("2\n") and f"{ro}: error: " in ro_part
    assert "Read-only file system" in ro_part or "not writable" in ro_part
    assert "\nhelp: " in ro_part
    assert full_part.strip().startswith("[]")
    assert "2\n" in full_part and f"{full}: error: " in full_part
    assert "No space left on device" in full_part
    assert out.rstrip().endswith("LEFT []")  # nothing left on the full disk
