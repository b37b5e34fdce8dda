"""What a user coming from SINGA 0.3 brings along: its command-line flags and its
cluster-wide settings file.

SINGA 0.3 ran ``singa-run.sh -conf job.conf [-resume] [-test]``, and the binary got
``-singa_conf conf/singa.conf -singa_job ID -host H`` from the script. singa takes the
job.conf as an argument of ``singa train`` / ``singa test``; :func:`translate_argv` turns
0.3's flags into those (with a note per flag), so a 0.3 command line still runs.

0.3's ``conf/singa.conf`` (a ``SingaProto``: ``zookeeper_host``, ``log_dir``) held settings
for the whole cluster; singa needs no ZooKeeper and writes its log to the terminal.
:func:`settings_file_error` recognises that file when it is given as the job.
"""

from __future__ import annotations

import re

from singa_core.contracts.errors import Location, SingaError

COMMANDS_WITH_JOB = ("train", "test")
#: SingaProto's fields (0.3's conf/singa.conf)
SETTINGS_FIELDS = ("zookeeper_host", "log_dir")
_DROPPED = {
    "-singa_conf": "SINGA 0.3's cluster-wide settings file (ZooKeeper address, log folder); "
    "singa needs none",
    "-singa_job": "SINGA 0.3's job id (given by singa-run.sh); singa needs none",
    "-host": "SINGA 0.3's host of this process (given by singa-run.sh); singa runs on this machine",
}


def _split(argv: list[str], i: int) -> tuple[str, str | None, int]:
    """The flag at ``argv[i]``, its value (``-flag=value`` or the next word) and the index
    after them."""
    flag, eq, value = argv[i].partition("=")
    if eq:
        return flag, value, i + 1
    if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        return flag, argv[i + 1], i + 2
    return flag, None, i + 1


def translate_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` (without the program name) with SINGA 0.3's flags replaced by singa's, and
    one note per flag replaced. Unchanged when it holds none of 0.3's flags."""
    legacy = {"-conf", "-resume", "-test", *_DROPPED}
    if not any(a.partition("=")[0] in legacy for a in argv):
        return list(argv), []
    command = argv[0] if argv and argv[0] in COMMANDS_WITH_JOB else None
    rest = argv[1:] if command else list(argv)
    out: list[str] = []
    notes: list[str] = []
    conf = None
    test_mode = resume = False
    i = 0
    while i < len(rest):
        word = rest[i]
        flag = word.partition("=")[0]
        if flag == "-conf":
            _, conf, i = _split(rest, i)
            continue
        if flag in _DROPPED:
            _, value, i = _split(rest, i)
            shown = f"{flag} {value}" if value else flag
            notes.append(f"note: ignoring `{shown}`: {_DROPPED[flag]}")
            continue
        if word == "-test":
            test_mode = True
        elif word == "-resume":
            resume = True
        else:
            out.append(word)
        i += 1
    if command is None:
        command = "test" if test_mode else "train"
    if test_mode and command != "test":
        notes.append("note: ignoring `-test`: it is SINGA 0.3's flag for `singa test`")
    new = [command]
    if conf is not None:
        new.append(conf)
        notes.append(
            f"note: `-conf {conf}` is SINGA 0.3's flag; singa takes the job.conf as an "
            f"argument: `singa {command} {conf}`"
        )
    elif test_mode and argv[:1] != ["test"]:
        notes.append("note: `-test` is SINGA 0.3's flag; singa's is the command `singa test`")
    if resume:
        if command == "train":
            new.append("--resume")
            notes.append("note: `-resume` is SINGA 0.3's flag; singa's is `--resume`")
        else:
            notes.append("note: ignoring `-resume`: `singa test` loads the newest checkpoint")
    return new + out, notes


_FIELD = re.compile(r"^\s*([A-Za-z_]\w*)\s*[:{]", re.MULTILINE)


def settings_file_error(text: str, path: str) -> SingaError | None:
    """An error explaining that ``path`` is 0.3's conf/singa.conf, if its top-level fields
    are SingaProto's (zookeeper_host, log_dir); None otherwise."""
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    fields = [(m.group(1), m.start(1)) for m in _FIELD.finditer(code)]
    if not fields or any(name not in SETTINGS_FIELDS for name, _ in fields):
        return None
    name, offset = fields[0]
    line = code.count("\n", 0, offset) + 1
    col = offset - (code.rfind("\n", 0, offset) + 1) + 1
    return SingaError(
        f"this is SINGA 0.3's cluster-wide settings file (conf/singa.conf: "
        f"{', '.join(SETTINGS_FIELDS)}), not a job configuration",
        where=Location(path, line, col),
        notes=[
            f"{name} configured 0.3's cluster services; singa needs no ZooKeeper and prints "
            "its log to the terminal (metrics also go to WORKSPACE/metrics.jsonl), so it "
            "needs no such file"
        ],
        help="give the job's configuration instead, e.g. `singa train examples/mnist/job.conf`",
    )
