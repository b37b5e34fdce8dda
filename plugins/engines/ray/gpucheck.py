"""A job's GPUs checked on the nodes that will run them, before any actor is made.

The machine that runs ``singa train --engine ray`` opens no GPU of the job (it prepares the
job on its CPU; see ``api/job.py``): a worker's ``cuda:N`` is a GPU of the node Ray places its
process on. Once the placement is planned, every node that gets a process with GPU workers
runs one small task there that asks Ray for as many GPUs as the most of them any such
process asks for (so Ray sets ``CUDA_VISIBLE_DEVICES`` as it will for the actor) and opens
``cuda:0`` .. ``cuda:k-1`` as the actor will (:func:`singa_core.device.open_device`: CuPy
imports, a driver answers, the device exists, a kernel runs). A node that cannot is the
job's located error before any actor starts: the process and the node named, the node's
own message, the ``gpu`` field of job.conf (or ``--device``) it comes from and the node's
help line. ``--dry-run`` runs the same check on the same plan and says what each node
opened.

The stand-in device of the test hook ``SINGA_RAY_STANDIN_GPU=1`` needs no check (it is
the CPU everywhere).
"""

from __future__ import annotations

import time

from singa_core.errors import SingaError


def open_gpus(count: int, where: str) -> dict:
    """Run on a node, in a task that Ray gave ``count`` GPUs: open ``cuda:0`` ..
    ``cuda:count-1``. ``{"opened": [their descriptions]}``, or ``{"error": {"message",
    "help"}}`` of the first that does not open (its :class:`SingaError`)."""
    from singa_core.device import open_device

    opened = []
    for i in range(count):
        try:
            opened.append(open_device(f"cuda:{i}", where).describe())
        except SingaError as err:
            return {"error": {"message": err.message, "help": err.help or ""}}
        except Exception as exc:  # noqa: BLE001 - said as the node's own error
            return {"error": {"message": f"cuda:{i}: {type(exc).__name__}: {exc}", "help": ""}}
    return {"opened": opened}


def gpu_processes(topology, requests, device_specs, where_of) -> list[tuple[int, int, str]]:
    """(process index, GPUs it asks for, where its first GPU worker's device is named)
    for every process with real GPU workers (``cuda``; not the stand-in)."""
    out = []
    for spec, r in zip(topology.procs, requests, strict=True):
        if not r.gpus:
            continue
        cuda = [
            j for _, j in spec.workers
            if j < len(device_specs) and str(device_specs[j]).startswith(("cuda", "gpu"))
        ]  # fmt: skip
        if cuda:
            out.append((spec.index, int(r.gpus), str(where_of(cuda[0]))))
    return out


def check_gpus(engine, requests, node_of: list[str], nodes, deadline: float,
               tick=None) -> list[str]:  # fmt: skip
    """Check every GPU process's node as described in the module text; a line per checked
    node for the dry-run (``GPUs: ...``); a located error when a node cannot open its GPUs
    or does not answer before ``deadline`` (``time.monotonic()``). ``tick()`` is called
    while waiting (the driver's signal check)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from singa_builtins.engines.ray.faults import summary
    from singa_builtins.engines.shm.context import worker_device_specs

    specs = worker_device_specs(engine.prepared)
    procs = gpu_processes(engine.topology, requests, specs, engine.device_where)
    if not procs:
        return []
    by_id = {n.id: n for n in nodes}
    per_node: dict[str, tuple[int, int, str]] = {}  # node -> the process asking the most
    for q, k, where in procs:
        node = node_of[q]
        if node not in per_node or k > per_node[node][1]:
            per_node[node] = (q, k, where)
    task = ray.remote(num_cpus=0, max_retries=0)(open_gpus)
    refs = {}
    for node, (_, k, where) in per_node.items():
        pinned = task.options(
            num_gpus=k, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        )
        refs[pinned.remote(k, where)] = node
    pending = list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
        if tick is not None:
            tick()
        if pending and time.monotonic() > deadline:
            late = ", ".join(by_id[refs[r]].label() for r in pending)
            raise SingaError(
                f"the check of the job's GPUs did not come back from node(s) {late} before "
                "the start-up deadline",
                where="--startup-timeout",
                help="a loaded node, or its GPUs taken by another job meanwhile; give it "
                "longer with --startup-timeout SECONDS",
            )
    lines = []
    for ref, node in refs.items():
        q, k, where = per_node[node]
        role = engine.topology.procs[q].role()
        label = by_id[node].label() if node in by_id else node[:12]
        try:
            answer = ray.get(ref)
        except (ray.exceptions.RayError, OSError) as exc:
            raise SingaError(
                f"{role} would run on node {label}, whose GPU check failed: {summary(exc)}",
                where=where,
                help="that node's Ray logs are in /tmp/ray/session_latest/logs there",
            ) from None
        if "error" in answer:
            err = answer["error"]
            raise SingaError(
                f"{role} would run on node {label}, which cannot give it its GPU: {err['message']}",
                where=where,
                help=f"on node {label}: {err['help'] or 'check its GPUs (nvidia-smi)'}",
            )
        lines.append(f"  GPUs: node {label} opens {', '.join(answer['opened'])} for {role}")
    return lines
