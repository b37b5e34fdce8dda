"""job.conf: protobuf text format -> ``singa.JobProto``, with precise user errors.

:func:`load_job` parses the file, maps protobuf's parse errors to ``FILE:LINE:COL`` errors
with a did-you-mean, and returns a :class:`JobConfig` that can locate any field of the
parsed message in the source text (``cfg.locate("neuralnet.layer[3].srclayers[0]")``), so
that errors found later (unknown type, missing source layer, shape mismatch) point at the
line the user wrote.

Plugin proto extensions may be written with their short name, as SINGA's docs do
(``[foo_conf] { ... }``); the short name is resolved to the unique registered extension
of the enclosing message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor_pool, text_format
from google.protobuf.descriptor import FieldDescriptor

from singa_core.contracts.errors import Location, SingaError, did_you_mean
from singa_core.schema import job_pb2

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<word>[A-Za-z0-9_.+\-]+)
  | (?P<punct>[{}<>\[\]:;,/])
  | (?P<other>.)
    """,
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int  # 1-based


def _tokens(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    line, line_start = 1, 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            line += 1
            line_start = m.end()
            continue
        if kind in ("ws", "comment"):
            continue
        toks.append(_Tok(kind, m.group(), line, m.start() - line_start + 1))
    return toks


def index_locations(text: str) -> dict[tuple, tuple[int, int]]:
    """Map each field occurrence path to its (line, col) in ``text``.

    Paths alternate field names and occurrence indices, e.g.
    ``("neuralnet", 0, "layer", 3, "srclayers", 1)``. Extension fields are keyed as
    ``"[name]"``. Best effort: malformed text simply yields fewer entries.
    """
    toks = _tokens(text)
    out: dict[tuple, tuple[int, int]] = {}
    stack: list[tuple[tuple, dict[str, int]]] = [((), {})]
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        if t.text in ("}", ">"):
            if len(stack) > 1:
                stack.pop()
            i += 1
            continue
        if t.text in (";", ","):
            i += 1
            continue
        if t.text == "[":  # extension name
            j = i + 1
            parts = []
            while j < n and toks[j].text != "]":
                parts.append(toks[j].text)
                j += 1
            name = "[" + "".join(parts) + "]"
            j += 1
        elif t.kind == "word":
            name = t.text
            j = i + 1
        else:
            i += 1
            continue
        path, counts = stack[-1]
        has_colon = j < n and toks[j].text == ":"
        if has_colon:
            j += 1
        if j < n and toks[j].text in ("{", "<"):
            idx = counts.get(name, 0)
            counts[name] = idx + 1
            out[path + (name, idx)] = (t.line, t.col)
            stack.append((path + (name, idx), {}))
            i = j + 1
            continue
        if has_colon and j < n and toks[j].text == "[":  # list value: f: [a, b]
            j += 1
            while j < n and toks[j].text != "]":
                if toks[j].text != ",":
                    idx = counts.get(name, 0)
                    counts[name] = idx + 1
                    out[path + (name, idx)] = (toks[j].line, toks[j].col)
                j += 1
            i = j + 1
            continue
        idx = counts.get(name, 0)
        counts[name] = idx + 1
        out[path + (name, idx)] = (t.line, t.col)
        # skip the value (adjacent string literals concatenate)
        j2 = j
        while j2 < n and toks[j2].kind in ("string",):
            j2 += 1
        i = max(j2, j + 1) if has_colon else j
    return out


_PATH_PART = re.compile(r"(\[[^\]]+\]|[A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?")


def parse_field_path(path: str) -> tuple:
    """``"neuralnet.layer[3].name"`` -> ``("neuralnet", 0, "layer", 3, "name", 0)``."""
    out: list = []
    for part in _split_path(path):
        m = _PATH_PART.fullmatch(part)
        if not m:
            raise ValueError(f"bad field path {path!r}")
        out += [m.group(1), int(m.group(2) or 0)]
    return tuple(out)


def _split_path(path: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in path:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "." and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


@dataclass
class JobConfig:
    """A parsed job.conf: the JobProto plus what is needed to point back into the file."""

    job: job_pb2.JobProto
    path: str
    text: str = ""
    locations: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    # field path key -> "command line: -o ..." for the fields a -o override set
    overridden: dict[tuple, str] = field(default_factory=dict)

    def locate(self, field_path: str | tuple | None = None) -> Location:
        """Location of a field: the ``-o`` that set it, else where it (or the nearest
        enclosing field) appears in the file."""
        if field_path is None:
            return Location(self.path)
        key = parse_field_path(field_path) if isinstance(field_path, str) else field_path
        if key in self.overridden:
            return Location(self.overridden[key])
        while key:
            if key in self.locations:
                line, col = self.locations[key]
                return Location(self.path, line, col)
            key = key[:-2]
        return Location(self.path)


# -- parsing ---------------------------------------------------------------------------
_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "([^"]+)"')
_NO_ENUM = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')
_NO_EXT = re.compile(r'Extension "([^"]+)" not registered')
_LINECOL = re.compile(r"^(\d+):(\d+) : (.*)$", re.S)


def _extension_short_names() -> dict[str, dict[str, list[str]]]:
    """For each extendable message full name: short extension name -> full names."""
    pool = descriptor_pool.Default()
    out: dict[str, dict[str, list[str]]] = {}
    for msg in job_pb2.DESCRIPTOR.message_types_by_name.values():
        if not msg.extension_ranges:
            continue
        table: dict[str, list[str]] = {}
        try:
            found = pool.FindAllExtensions(msg)
        except Exception:  # a pool a failed plugin import left inconsistent: no short names
            found = []
        for ext in found:
            table.setdefault(ext.name, []).append(ext.full_name)
        out[msg.full_name] = table
    return out


def _expand_short_extensions(text: str) -> str:
    """Rewrite ``[foo_conf]`` as ``[pkg.foo_conf]`` when exactly one extension is named so."""
    short: dict[str, set[str]] = {}
    for table in _extension_short_names().values():
        for name, fulls in table.items():
            short.setdefault(name, set()).update(fulls)

    def repl(m: re.Match) -> str:
        name = m.group(1)
        fulls = short.get(name, set())
        if len(fulls) == 1:
            (full,) = fulls
            return f"[{full}]"
        return m.group(0)

    # only outside strings and comments: operate line by line on code parts
    out_lines = []
    for line in text.split("\n"):
        code, rest = _split_code(line)
        out_lines.append(re.sub(r"\[\s*([A-Za-z_]\w*)\s*\]", repl, code) + rest)
    return "\n".join(out_lines)


def _split_code(line: str) -> tuple[str, str]:
    """Split a line into code (strings kept intact) and a trailing comment."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i], line[i:]
        i += 1
    return line, ""


# protobuf's text parser unescapes strings with a regex that takes quadratic time on a long
# run of backslashes (40,000 take minutes); no job.conf needs more than a few in a row
MAX_BACKSLASHES = 256
_BACKSLASH_RUN = re.compile(r"\\{" + str(MAX_BACKSLASHES + 1) + ",}")


def parse_job_text(text: str, path: str = "<job.conf>") -> JobConfig:
    job = job_pb2.JobProto()
    run = _BACKSLASH_RUN.search(text)
    if run:
        line = text.count("\n", 0, run.start()) + 1
        col = run.start() - (text.rfind("\n", 0, run.start()) + 1) + 1
        raise SingaError(
            f"{run.end() - run.start()} backslashes in a row (at most {MAX_BACKSLASHES})",
            where=Location(path, line, col),
            help="a string escapes a backslash as \\\\; this many is not a job configuration",
        )
    expanded = _expand_short_extensions(text)
    try:
        text_format.Parse(expanded, job)
    except text_format.ParseError as exc:
        raise _parse_error(exc, path) from None
    return JobConfig(job=job, path=path, text=text, locations=index_locations(text))


MAX_CONF_BYTES = 1 << 20  # SINGA's largest example is 10 KB; parsing 8 MB takes seconds


def _too_big(path, size: int) -> SingaError:
    return SingaError(
        f"{path} is {size:,} bytes; a job configuration is at most {MAX_CONF_BYTES:,}",
        where=Location(str(path)),
        help="job.conf describes the job; data belongs in store files (store_conf.path)",
    )


def _read_regular(p: Path) -> bytes:
    """The bytes of job.conf, opened ``O_NONBLOCK`` and checked with ``fstat``: a named
    pipe (or device, socket) given as job.conf is refused at once instead of blocking the
    read until something writes to it."""
    import stat

    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(str(p))
        if not stat.S_ISREG(mode):
            kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device or socket"
            raise SingaError(
                f"{p} is {kind}, not a file",
                where=str(p),
                help="give the path of a job.conf file, e.g. examples/mnist/job.conf",
            )
        with open(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def load_job(path: str | Path, overrides: list[str] = ()) -> JobConfig:
    """Read and parse a job.conf, then apply ``-o key=value`` overrides."""
    p = Path(path)
    try:
        raw = _read_regular(p)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SingaError(
            f"job configuration file not found: {path}",
            where=str(path),
            help="give the path of a job.conf file, e.g. examples/mnist/job.conf",
        ) from None
    except IsADirectoryError:
        raise SingaError(
            f"{path} is a directory, not a job.conf file",
            where=str(path),
            help="give the path of the job.conf inside it",
        ) from None
    except UnicodeDecodeError as exc:
        if len(raw) > MAX_CONF_BYTES:
            raise _too_big(path, len(raw)) from None
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SingaError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            where=Location(str(path), line, col),
            help="job.conf must be protobuf text format (UTF-8)",
        ) from None
    if len(raw) > MAX_CONF_BYTES:
        raise _too_big(path, len(raw))
    try:
        cfg = parse_job_text(text, str(path))
    except SingaError:
        from singa_core.jobconf.legacy import settings_file_error

        settings = settings_file_error(text, str(path))  # 0.3's conf/singa.conf
        if settings is not None:
            raise settings from None
        raise
    for ov in overrides:
        apply_override(cfg, ov)
    from singa_core.jobconf.limits import check_limits
    from singa_core.jobconf.paths import check_working_folder

    check_limits(cfg)  # a negative count, size or shape: located, before anything runs

    check_working_folder(cfg)  # `cd examples/mnist && singa train job.conf`: says where to run
    return cfg


MAX_ECHO = 120  # characters of the user's text an error message quotes


def _shorten(msg: str) -> str:
    """Cut the source text protobuf quotes in its message (a 10,000-deep nesting would
    echo a 30 KB line) to MAX_ECHO characters."""

    def cut(m: re.Match) -> str:
        body = m.group(1)
        if len(body) <= MAX_ECHO:
            return m.group(0)
        return f"'{body[:MAX_ECHO]}' ... ({len(body) - MAX_ECHO} more characters)"

    msg = re.sub(r"'([^'\n]*)'", cut, msg)
    if len(msg) > 4 * MAX_ECHO:
        msg = msg[: 4 * MAX_ECHO] + f" ... ({len(msg) - 4 * MAX_ECHO} more characters)"
    return msg


def _parse_error(exc: text_format.ParseError, path: str) -> SingaError:
    msg = str(exc)
    line, col = exc.GetLine(), exc.GetColumn()
    m = _LINECOL.match(msg)
    if m:
        line, col, msg = int(m.group(1)), int(m.group(2)), m.group(3)
    msg = _shorten(msg)
    where = Location(path, line, col) if line else Location(path)
    help_ = None
    if fm := _NO_FIELD.search(msg):
        type_name, fname = fm.groups()
        desc = descriptor_pool.Default().FindMessageTypeByName(type_name)
        names = [f.name for f in desc.fields]
        msg = f'unknown field "{fname}" in {type_name.split(".")[-1]}'
        help_ = did_you_mean(fname, names) or (
            f"{type_name.split('.')[-1]} fields are: {', '.join(sorted(names))}"
        )
    elif em := _NO_ENUM.search(msg):
        type_name, value = em.groups()
        desc = descriptor_pool.Default().FindEnumTypeByName(type_name)
        names = [v.name for v in desc.values]
        msg = f'unknown {type_name.split(".")[-1]} value "{value}"'
        help_ = did_you_mean(value, names) or f"valid values: {', '.join(names)}"
        if type_name.endswith("LayerType"):
            help_ += ' (a third-party layer is named with user_type: "...")'
    elif xm := _NO_EXT.search(msg):
        name = xm.group(1)
        msg = f'unknown extension field "[{name}]"'
        known = sorted({n for t in _extension_short_names().values() for n in t})
        help_ = (
            "extension fields come from installed plugins; install the plugin that "
            "defines it and check `singa list-plugins`"
            + (f" (known: {', '.join(known)})" if known else "")
        )
    else:
        msg = msg[0].lower() + msg[1:] if msg else "syntax error"
        help_ = "job.conf is protobuf text format: `field: value` and `message { ... }`"
    return SingaError(msg, where=where, help=help_)


# -- overrides ---------------------------------------------------------------------------
def apply_override(cfg: JobConfig, override: str) -> None:
    """Apply ``dotted.path[=index].field=value`` to the JobProto (``-o`` on the CLI)."""
    shown = override if override.isprintable() else override.encode("unicode_escape").decode()
    where = f"command line: -o {shown}"
    if "=" not in override:
        raise SingaError(
            "an override must look like FIELD=VALUE",
            where=where,
            help="e.g. -o train_steps=100 or -o neuralnet.layer[0].store_conf.batchsize=32",
        )
    key, value = override.split("=", 1)
    parts = _split_path(key.strip())
    msg = cfg.job
    for depth, part in enumerate(parts):
        m = _PATH_PART.fullmatch(part)
        if not m:
            raise SingaError(
                f"bad field path {key!r}",
                where=where,
                help="use names separated by dots, e.g. updater.momentum, and a plugin's "
                "extension field as in job.conf, e.g. train_one_batch.[pkg.foo_conf].repeat",
            )
        name, index = m.group(1), m.group(2)
        if name.startswith("["):
            fd = _extension_field(msg, name[1:-1].strip(), where)
        else:
            fd = msg.DESCRIPTOR.fields_by_name.get(name)
        if fd is None:
            names = list(msg.DESCRIPTOR.fields_by_name)
            raise SingaError(
                f'{msg.DESCRIPTOR.name} has no field "{name}"',
                where=where,
                help=did_you_mean(name, names) or f"fields: {', '.join(sorted(names))}",
            )
        if fd.is_extension:  # read, set and clear through msg.Extensions
            name = f"[{fd.full_name}]"
        last = depth == len(parts) - 1
        repeated = fd.is_repeated
        if fd.message_type is not None:
            if last:
                raise SingaError(
                    f'"{key}" is a message; set one of its fields',
                    where=where,
                    help=f"e.g. -o {key}.FIELD=VALUE",
                )
            if repeated:
                seq = _field_value(msg, fd)
                i = int(index or 0)
                if i >= len(seq):
                    raise SingaError(
                        f"{key}: index {i} out of range ({len(seq)} entries)",
                        where=where,
                        help="indices start at 0",
                    )
                msg = seq[i]
            else:
                msg = _field_value(msg, fd)
            continue
        if not last:
            raise SingaError(
                f'"{name}" is not a message',
                where=where,
                help="only the last part of a field path can be a value; the parts before it "
                "name messages",
            )
        text_value = value
        if fd.type == fd.TYPE_STRING and value[:1] not in ("'", '"'):
            text_value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if repeated:
            if index is not None:
                seq = _field_value(msg, fd)
                i = int(index)
                if i >= len(seq):
                    raise SingaError(
                        f"{key}: index {i} out of range ({len(seq)} entries)",
                        where=where,
                        help="indices start at 0",
                    )
                tmp = type(msg)()
                _merge_scalar(tmp, name, text_value, where, key, fd)
                seq[i] = _field_value(tmp, fd)[0]
            else:
                _clear_field(msg, fd)
                for v in (
                    [x for x in text_value.split(",")]
                    if fd.type != fd.TYPE_STRING
                    else [text_value]
                ):
                    _merge_scalar(msg, name, v.strip(), where, key, fd)
        else:
            _merge_scalar(msg, name, text_value, where, key, fd)
    cfg.overrides.append(override)
    cfg.overridden[parse_field_path(key.strip())] = where


def _field_value(msg, fd):
    return msg.Extensions[fd] if fd.is_extension else getattr(msg, fd.name)


def _clear_field(msg, fd) -> None:
    if fd.is_extension:
        msg.ClearExtension(fd)
    else:
        msg.ClearField(fd.name)


def _extension_field(msg, written: str, where: str):
    """The extension of ``msg`` written ``[pkg.name]`` or, as job.conf allows, ``[name]``
    when one installed extension of the message is named so; a SingaError otherwise."""
    owner = msg.DESCRIPTOR.name
    try:
        exts = list(descriptor_pool.Default().FindAllExtensions(msg.DESCRIPTOR))
    except Exception:  # see _extension_short_names
        exts = []
    for ext in exts:
        if ext.full_name == written:
            return ext
    named = [ext for ext in exts if ext.name == written]
    if len(named) == 1:
        return named[0]
    if named:
        full = " or ".join(f"[{e.full_name}]" for e in named)
        raise SingaError(
            f'extension "[{written}]" of {owner} is ambiguous',
            where=where,
            help=f"write its full name: {full}",
        )
    known = sorted({f"[{e.full_name}]" for e in exts} | {f"[{e.name}]" for e in exts})
    listed = ", ".join(sorted(f"[{e.full_name}]" for e in exts))
    raise SingaError(
        f'{owner} has no extension "[{written}]"',
        where=where,
        help=did_you_mean(f"[{written}]", known)
        or (f"{owner}'s extensions: {listed}" if exts else f"no installed plugin extends {owner}")
        + "; extensions come from plugins (see `singa list-plugins`)",
    )


def _merge_scalar(msg, name: str, text_value: str, where: str, key: str = "", fd=None) -> None:
    try:
        text_format.Merge(f"{name}: {text_value}", msg)
    except text_format.ParseError as exc:
        err = _parse_error(exc, "override")
        help_ = err.help
        if fd is not None and (help_ is None or help_.startswith("job.conf is protobuf")):
            help_ = override_hint(key.strip(), fd)  # not protobuf's text-format advice
        raise SingaError(err.message, where=where, help=help_) from None


_INTEGER_TYPES = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}


def override_hint(key: str, fd) -> str:
    """The FIELD=VALUE line to write for ``key``, with a value of the field's type."""
    unsigned = fd.type in (
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
    )
    if fd.type in _INTEGER_TYPES:
        bits = 32 if fd.cpp_type in (fd.CPPTYPE_INT32, fd.CPPTYPE_UINT32) else 64
        top = (1 << bits) - 1 if unsigned else (1 << (bits - 1)) - 1
        kind = f"a whole number from 0 to {top:,}" if unsigned else f"a whole number up to {top:,}"
        example = "100"
    elif fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        kind, example = "a number", "0.5"
    elif fd.type == FieldDescriptor.TYPE_BOOL:
        kind, example = "true or false", "true"
    elif fd.enum_type is not None:
        names = [v.name for v in fd.enum_type.values]
        kind, example = f"one of {', '.join(names)}", names[0]
    else:
        kind, example = "text", "NAME"
    many = ", a list separated by commas" if fd.is_repeated else ""
    if fd.is_repeated:
        example = f"{example},{example}"
    return f"{key} takes {kind}{many}: -o {key}={example} (one word, no spaces around '=')"
