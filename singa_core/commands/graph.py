"""Net graphs for ``singa train --dry-run --graph FILE`` (as SINGA 0.3 wrote its nets as
Graphviz graphs for visualisation).

:func:`net_graph` renders the nets a job built — one cluster per phase, after unrolling
and partitioning — as Graphviz ``dot`` text: a box per layer (name, type, output shape
and its Params with their shapes; a Param that uses another's values reads ``w@1 = w``),
an edge per source (``[k]`` when a layer hands each consumer its own part, as kSlice
does), bridges (``bridge_src``/``bridge_dst``, the only edges between partitions) drawn
red and dashed, the layers of each partition in a cluster ``worker j of group 0``, and a
note with the engine's placement of processes and servers (``Engine.describe``).

:func:`write_graph` writes ``.dot`` (or ``.gv``) as is; ``.svg``/``.png``/``.pdf`` are
rendered by Graphviz's ``dot`` when it is installed, and otherwise the ``.dot`` text is
written next to the requested file with a note saying how to render it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

RENDERED = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
TEXT = {".dot", ".gv"}
_PART = re.compile(r"^(.*)\[(\d+)\]$")


def _q(text: str) -> str:
    """A dot string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape) -> str:
    return "x".join(str(s) for s in shape) if shape else "-"


def _layer_label(name: str, typ: str, layer) -> str:
    lines = [name, typ, _shape(layer.shape)]
    for p in layer.params:
        if p.owner is not p:
            lines.append(f"{p.name} = {p.owner.name}")
        else:
            lines.append(f"{p.name} {_shape(p.shape)}")
    return "\n".join(lines)


def net_graph(nets: dict, phase_names: dict[int, str], placement: list[str], title: str) -> str:
    """Graphviz dot text of ``nets`` (phase -> NeuralNet)."""
    from singa_core.netbuilder.specs import layer_type_name

    out = [
        f"digraph {_q(title)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica",'
        " fontsize=10];",
        '  edge [fontname="Helvetica", fontsize=9];',
        f"  label={_q(title)}; labelloc=t; fontname=Helvetica;",
    ]
    for phase, net in nets.items():
        pname = phase_names.get(phase, str(phase))
        out.append(f"  subgraph {_q('cluster_' + pname)} {{")
        out.append(f"    label={_q(f'{pname} net ({len(net.layers)} layers)')};")
        by_partition: dict[int, list[str]] = {}
        ids = {}
        for layer in net.layers:
            nid = f"{pname}/{layer.name}"
            ids[layer.name] = nid
            typ = layer_type_name(net.specs[layer.name].conf)
            attrs = [f"label={_q(_layer_label(layer.name, typ, layer))}"]
            if typ.startswith("kBridge") or layer.name.startswith("bridge_"):
                attrs.append('fillcolor="#fde2e2"')
            elif layer.params:
                attrs.append('fillcolor="#dff0d8"')
            node = f"{_q(nid)} [{', '.join(attrs)}];"
            by_partition.setdefault(layer.ctx.partition_id, []).append(node)
        parts = getattr(net, "num_partitions", 1)
        for pid, nodes in sorted(by_partition.items()):
            if parts > 1:
                out.append(f"    subgraph {_q(f'cluster_{pname}_worker{pid}')} {{")
                out.append(f"      label={_q(f'worker {pid} of group 0')}; style=dashed;")
                out += [f"      {n}" for n in nodes]
                out.append("    }")
            else:
                out += [f"    {n}" for n in nodes]
        for layer in net.layers:
            for src_obj in net.srclayers(layer):
                src, label = src_obj.name, None  # a part ("slice(x)[1]") names its layer
                if src not in ids:
                    m = _PART.match(src)
                    if m is None or m.group(1) not in ids:
                        continue
                    src, label = m.group(1), f"[{m.group(2)}]"
                attrs = []
                if label:
                    attrs.append(f"label={_q(label)}")
                if src.startswith("bridge_src") and layer.name.startswith("bridge_dst"):
                    attrs += ["color=red", "style=dashed", "penwidth=1.5"]
                tail = f" [{', '.join(attrs)}]" if attrs else ""
                out.append(f"    {_q(ids[src])} -> {_q(ids[layer.name])}{tail};")
        out.append("  }")
    if placement:
        note = "placement\n" + "\n".join(line.strip() for line in placement)
        out.append(
            f'  "placement" [label={_q(note)}, shape=note, fillcolor="#fff8dc", fontsize=9];'
        )
    out.append("}")
    return "\n".join(out) + "\n"


def write_graph(dot_text: str, path: Path) -> tuple[Path, str | None]:
    """Write ``dot_text`` to ``path`` (rendered by Graphviz for .svg/.png/.pdf). Returns
    (the file written, a note or None)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in TEXT:
        atomic_write_bytes(path, dot_text.encode(), "graph file")
        return path, None
    if suffix not in RENDERED:
        raise SingaError(
            f"cannot tell the graph format from {path.name!r}",
            where="--graph",
            help="name a .dot (Graphviz text), .svg, .png or .pdf file",
        )
    dot = shutil.which("dot")
    if dot is None:
        fallback = path.with_suffix(".dot")
        atomic_write_bytes(fallback, dot_text.encode(), "graph file")
        return fallback, (
            f"note: Graphviz's dot is not installed; wrote {fallback} instead "
            f"(render it with: dot -T{RENDERED[suffix]} {fallback} -o {path})"
        )
    try:
        res = subprocess.run(
            [dot, f"-T{RENDERED[suffix]}"],
            input=dot_text.encode(),
            capture_output=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SingaError(
            "Graphviz's dot took more than 5 minutes to draw the net",
            where="--graph",
            help="write a .dot file instead and render it yourself",
        ) from None
    if res.returncode != 0:
        raise SingaError(
            f"Graphviz's dot failed: {res.stderr.decode(errors='replace').strip()[:500]}",
            where="--graph",
            help="write a .dot file instead (--graph net.dot)",
        )
    atomic_write_bytes(path, res.stdout, "graph file")
    return path, None
