"""Faults on emulated machines during a run of the Ray engine: how every run ends.

    python benchmarks/ray_faults.py [--quick] [--kills 10] [--halts 5] [--gcs-kills 2]
        [--start-failures 2] [--max-restarts 0 1] [--placement spread] [--steps 40]
        [--checkpoint-freq 10] [--seed 7]

Three machines (and a fourth outside the cluster, for the private runtime's failed starts),
each with its own network, PID and mount namespaces on a bridge in a
namespace of its own (tests/engines/emulated_machines.py; nothing is added to the root
network namespace; needs root, unshare, nsenter, ip and tc), made into a Ray cluster by the
README's "## Two or more machines" block (token authentication on): machine 0 is the head
and runs ``singa train``; machines 1 and 2 join. The job is the README's (SINGA's MNIST MLP)
with a checkpoint every ``--checkpoint-freq`` steps and ``--seed``:

* with ``--max-restarts 0``: as the README has it, Downpour (2 worker groups of 2 workers,
  1 server group of 2 servers);
* with ``--max-restarts`` N > 0: synchronous (``-o cluster.nworker_groups=1``: 1 group of 2
  workers, 2 separate servers), so that a run is determined by its seed and its checkpoint
  and a restarted run can be compared with a resume (Downpour's groups race: two runs never
  give equal parameters).

Once the first checkpoint is written, a fault hits the first non-head machine the engine
placed a process on:

* a raylet kill: SIGKILL to that machine's raylet (found in its PID namespace);
* a machine halt: SIGKILL to its PID namespace's PID 1 (every process on it dies at once);
* a GCS kill: SIGKILL to the head machine's ``gcs_server`` (the fault hits the head, not a
  member): located when the message names the head's GCS address ("lost the head node (its
  GCS at HEAD_IP:6379)"); ok within 30 s. Afterwards the whole cluster is made again (every
  machine halted, re-created, the README's block run again): Ray keeps no cluster without
  its GCS.

Each fault runs ``--kills`` / ``--halts`` / ``--gcs-kills`` times per ``--max-restarts``
value. Then ``--start-failures`` times each, a private runtime whose start fails: on the
fourth machine, ``singa train --engine ray`` (a small MLP, no ``--address``) while a node
under extreme load is emulated: the moment the runtime's raylet exists, its raylet ("start:
raylet": Ray waits 30 s and raises a bare ``Exception: The current node timed out during
startup``) or its GCS ("start: gcs") is stopped with SIGSTOP. Recorded: the exit, a
traceback, whether the message is located ("--engine ray: error: cannot start a private
Ray runtime"), the seconds, and the processes left on that machine once the command has
ended (``left``: Ray's, since nothing else runs there; they are then killed by pid); ok is
exit 2, located, no traceback and nothing left. Recorded per
run: the exit code, whether a Python traceback appeared, the first line of the message (the
error, or the restart note), whether it is located (names the lost process's role and
number and the machine's address), whether an exit-2 message names the workspace's newest
checkpoint (its file and step, or says that none was written), whether ``singa-ray-*``
names of the run's nodes were left in the shared /dev/shm, and, with restarts, whether the
job finished all its steps on the machines that remained and **ended equal to a resume from
the checkpoint it restarted from**: when the driver's note "restarting from the checkpoint
of step N" appears, that step's files are copied into a new workspace; after the restarted
run ends, ``singa train --resume`` runs from that workspace on the same remaining machines
(the fault's machine is still down) and the two final checkpoints' params
(``singa_core.running.checkpoint.read_params``) must agree within 1e-5 relative (the
largest |a - b| / max|b| over the Params; 0 when they are equal bit for bit). A run is
``ok`` (the issue's acceptance) when it has no traceback, leaves no segment, and either
ends in exit 2 with a located message naming the newest checkpoint, or restarted, finished
and equals the resume. Between runs the machine is halted, re-created and joins again, so
every run starts on three nodes. A summary table closes.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from _common import REPO, emulated_machines_recipe, load_average, mnist_stores

sys.path.insert(0, str(REPO))
from tests.engines.emulated_machines import (  # noqa: E402
    EmulatedCluster,
    join,
    live_nodes,
    node_ids,
    placements,
    ray_segments,
    segments_left,
    start_ray,
)

HEAD, MEMBERS, SPARE = 0, (1, 2), 3  # SPARE: outside the cluster, for the failed starts
HEAD_LOSS_WITHIN = 30.0  # seconds: the bound for a GCS kill
EQUAL_WITHIN = 1e-5  # relative: the largest |a - b| / max|b| over the Params
RESTART_NOTE = re.compile(r"restarting from the checkpoint of step (\d+)")
ROLE = re.compile(r"(?:worker|server)\S* process \d+")  # "worker process 2", "server process 4"
# step10-worker0, step10-worker0.state.npz, step10-worker0.manifest.json (not the hidden
# files of a write in progress)
_STEP_FILE = re.compile(r"step(\d+)-")


def wait_for_nodes(cluster, recipe, want: list[str], timeout: float = 90) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = live_nodes(cluster, recipe, HEAD)
        if nodes == want or time.monotonic() > deadline:
            return nodes
        time.sleep(1)


def message_line(stderr: str) -> str:
    """The first line of how the run ended: its error, else the restart note."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    for pick in (
        lambda x: re.match(r"(?:[-\w]+: )?error: ", x),  # "error: ...", "--address: error: ..."
        lambda x: "restarting from the checkpoint" in x,
        lambda x: "lost" in x,
    ):
        found = [x for x in lines if pick(x)]
        if found:
            return found[0]
    return lines[-1] if lines else ""


def names_newest_checkpoint(stderr: str, ws: Path) -> bool:
    """Whether the error names the workspace's newest complete checkpoint (its file and
    step), or says that no checkpoint was written when there is none."""
    from singa_core.running import checkpoint as ckpt

    latest = ckpt.latest_checkpoint(ws)
    if latest is None:
        return "no checkpoint was written" in stderr
    step, files = latest
    return any(f"{f} (step {step})" in stderr for f in files)


def train_line(cluster, recipe, args, ws: Path, restarts: int, resume: bool = False) -> str:
    """The README's ``singa train`` line with this benchmark's overrides: Downpour without
    restarts, one synchronous worker group with them."""
    stores = args.stores
    line = recipe.fill(recipe.train, cluster.address(HEAD))
    overrides = [
        f"train_steps={args.steps}", "test_steps=0", f"checkpoint_freq={args.checkpoint_freq}",
        "disp_freq=10", f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        f"cluster.workspace={ws}",
    ]  # fmt: skip
    if restarts:
        overrides.append("cluster.nworker_groups=1")
    line += "".join(f" -o {shlex.quote(o)}" for o in overrides)
    line += f" --placement {args.placement} --seed {args.seed}"
    line += " --resume --max-restarts 0" if resume else f" --max-restarts {restarts}"
    return line


def copy_step(ws: Path, step: int, to: Path) -> int:
    """Copy the files of checkpoint ``step`` of workspace ``ws`` into ``to``'s checkpoint
    folder (a workspace holding only that checkpoint); how many were copied."""
    src, dst = ws / "checkpoint", to / "checkpoint"
    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(src.iterdir()) if src.is_dir() else ():
        m = _STEP_FILE.match(f.name)
        if m and int(m.group(1)) == step and f.is_file():
            shutil.copy2(f, dst / f.name)
            n += 1
    return n


def params_difference(a: Path, b: Path) -> tuple[float, bool]:
    """(the largest |a - b| / max|b| over the Params of two checkpoints, whether they are
    equal bit for bit); inf when they hold different Params."""
    import numpy as np

    from singa_core.running.checkpoint import read_params

    pa = {r.name: r.value for r in read_params(a)}
    pb = {r.name: r.value for r in read_params(b)}
    if pa.keys() != pb.keys() or any(pa[k].shape != pb[k].shape for k in pa):
        return float("inf"), False
    worst, same = 0.0, True
    for k, va in pa.items():
        va, vb = np.asarray(va, np.float64), np.asarray(pb[k], np.float64)
        diff = float(np.max(np.abs(va - vb))) if va.size else 0.0
        scale = float(np.max(np.abs(vb))) if vb.size else 0.0
        worst = max(worst, diff / scale if scale else (0.0 if diff == 0 else float("inf")))
        same = same and bool(np.array_equal(va, vb))
    return worst, same


def resume_check(cluster, recipe, args, r: dict, ws: Path, snapshot: Path, tmp: Path, n: int):
    """``singa train --resume`` from ``snapshot`` (the restart's checkpoint only) on the
    machines that remain; its final params compared with the restarted run's."""
    remaining = sorted(cluster.address(i) for i in (HEAD, *MEMBERS) if i != r["victim"])
    nodes = wait_for_nodes(cluster, recipe, remaining)
    if nodes != remaining:
        r["resume_note"] = f"live nodes {nodes}, not {remaining}"
    before = ray_segments()
    t0 = time.monotonic()
    res = cluster.run(HEAD, train_line(cluster, recipe, args, snapshot, 1, resume=True),
                      env=recipe.env, timeout=args.timeout)  # fmt: skip
    r["resume_seconds"] = time.monotonic() - t0
    text = res.stdout + res.stderr
    (tmp / f"resume{n}").write_text(text)
    r["resume_exit"] = res.returncode
    r["traceback"] = r["traceback"] or "Traceback" in text
    r["left"] = sorted(set(r["left"]) | segments_left(before, node_ids(text)))
    final = f"step{args.steps}-worker0"
    if res.returncode != 0 or f"resuming at step {r['restart_step']}" not in res.stderr:
        r["resume_note"] = f"resume exit {res.returncode}: {message_line(res.stderr)[:200]}"
        return
    r["rel_diff"], r["bitwise"] = params_difference(
        ws / "checkpoint" / final, snapshot / "checkpoint" / final
    )
    r["equal"] = r["rel_diff"] <= EQUAL_WITHIN


def one_run(cluster, recipe, args, kind: str, restarts: int, tmp: Path, n: int) -> dict:
    ws, snapshot = tmp / f"ws{n}", tmp / f"ws{n}-resume"
    line = train_line(cluster, recipe, args, ws, restarts)
    out_path, err_path = tmp / f"out{n}", tmp / f"err{n}"
    before = ray_segments()
    first = ws / "checkpoint" / f"step{args.checkpoint_freq}-worker0"
    result = {"fault": kind, "restarts": restarts, "victim": None, "restart_step": None}
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = cluster.popen(HEAD, line, env=recipe.env, stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 300
            while not first.exists():
                if p.poll() is not None or time.monotonic() > deadline:
                    result["error"] = (
                        f"exit {p.poll()} before the first checkpoint: "
                        + err_path.read_text()[-1500:]
                    )
                    return result
                time.sleep(0.2)
            placed = next(
                (x for x in err_path.read_text().splitlines() if x.startswith("ray: ")), ""
            )
            victim = next(
                (m for m in MEMBERS if f" on {cluster.address(m)} " in placed), MEMBERS[0]
            )
            result["victim"] = victim
            address = cluster.address(victim)
            if kind == "gcs kill":
                victim = result["victim"] = HEAD
                address = f"{cluster.address(HEAD)}:{recipe.port()}"
                gcs = cluster.find(HEAD, "gcs_server")
                if len(gcs) != 1:
                    result["error"] = f"{len(gcs)} gcs_server processes on the head"
                    return result
                os.kill(gcs[0], signal.SIGKILL)
            elif kind == "raylet kill":
                raylets = cluster.find(victim, "raylet")
                if len(raylets) != 1:
                    result["error"] = f"{len(raylets)} raylets on machine {victim}"
                    return result
                os.kill(raylets[0], signal.SIGKILL)
            else:
                cluster.halt(victim)
            t0 = time.monotonic()
            # until the end; the checkpoint a restart starts from is copied when its note
            # appears (the restarted attempt writes later steps only, but a copy then is the
            # checkpoint as it was)
            while p.poll() is None and time.monotonic() < t0 + args.timeout:
                if result["restart_step"] is None:
                    m = RESTART_NOTE.search(err_path.read_text())
                    if m:
                        result["restart_step"] = int(m.group(1))
                        result["copied"] = copy_step(ws, int(m.group(1)), snapshot)
                time.sleep(0.2)
            result["hung"] = p.poll() is None
            result["seconds"] = time.monotonic() - t0
        finally:
            if p.poll() is None:
                cluster.stop(p)
                p.wait()
    stdout, stderr = out_path.read_text(), err_path.read_text()
    text = stdout + stderr
    message = message_line(stderr)
    m = RESTART_NOTE.search(stderr)
    if m and result["restart_step"] is None:  # the note came as the run ended
        result["restart_step"] = int(m.group(1))
        result["copied"] = copy_step(ws, int(m.group(1)), snapshot)
    result.update(
        exit=p.returncode,
        traceback="Traceback" in text,
        message=message,
        names_machine=address in message,
        located=(
            f"lost the head node (its GCS at {address})" in message
            if kind == "gcs kill"
            else address in message and bool(ROLE.search(message))
        ),
        names_checkpoint=names_newest_checkpoint(stderr, ws) if p.returncode else None,
        restarted=m is not None,
        left=sorted(segments_left(before, node_ids(text))),
        finished=p.returncode == 0 and f"finished at step {args.steps} " in text,
        equal=None,
        rel_diff=None,
    )
    if result["restarted"] and result["finished"]:
        if result.get("copied"):
            resume_check(cluster, recipe, args, result, ws, snapshot, tmp, n)
        else:
            result["resume_note"] = f"no files of step {result['restart_step']} to copy"
        if result["equal"] is None:
            result["equal"] = False
    result["ok"] = (
        not result["traceback"]
        and not result["left"]
        and not result["hung"]
        and (kind != "gcs kill" or result["seconds"] < HEAD_LOSS_WITHIN)
        and (
            (p.returncode == 2 and result["located"] and result["names_checkpoint"])
            or (result["restarted"] and result["finished"] and bool(result["equal"]))
        )
    )
    shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(snapshot, ignore_errors=True)
    return result


def start_failure_run(cluster, kind: str, tmp: Path, n: int, timeout: float) -> dict:
    """A private runtime whose start fails on the spare machine: its raylet or GCS stopped
    (SIGSTOP) the moment the raylet exists; how the command ends and what it leaves."""
    from singa_core.testing import blobs_csv, mlp_job

    stopped = {"start: raylet": "raylet", "start: gcs": "gcs_server"}[kind]
    work = tmp / f"start{n}"
    work.mkdir()
    conf = work / "job.conf"
    conf.write_text(mlp_job(blobs_csv(work / "blobs.csv"), steps=50))
    result = {"fault": kind, "restarts": 0, "victim": SPARE, "restart_step": None}
    done, seen = threading.Event(), []

    def stop_at_start() -> None:
        while not done.is_set():
            if cluster.find(SPARE, "raylet"):
                for pid in cluster.find(SPARE, stopped):
                    os.kill(pid, signal.SIGSTOP)
                    seen.append(pid)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=stop_at_start, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        res = cluster.run(SPARE, f"singa train {conf} --engine ray --workspace {work / 'ws'}",
                          env={"RAY_USAGE_STATS_ENABLED": "0"}, timeout=timeout)  # fmt: skip
    finally:
        done.set()
        watcher.join()
    seconds = time.monotonic() - t0
    pid1 = cluster.pid1(SPARE)
    left = {p: os.path.basename(c[0]) + (" " + c[1] if len(c) > 1 else "")
            for p, c in cluster.processes(SPARE).items() if p != pid1}  # fmt: skip
    for pid in left:  # by pid, on that machine only
        os.kill(pid, signal.SIGKILL)
    # "--engine ray: error: ..." (message_line takes "error:" after one word only)
    errors = [x.strip() for x in res.stderr.splitlines() if ": error: " in x]
    message = errors[0] if errors else message_line(res.stderr)
    result.update(
        exit=res.returncode,
        traceback="Traceback" in res.stdout + res.stderr,
        message=message if seen else f"({stopped} never seen) {message}",
        located="--engine ray: error: cannot start a private Ray runtime" in message,
        names_checkpoint=None,
        restarted=False,
        finished=False,
        equal=None,
        rel_diff=None,
        left=sorted(f"{p} {c[:60]}" for p, c in left.items()),
        hung=res.timed_out,
        seconds=seconds,
    )
    result["ok"] = (
        bool(seen) and res.returncode == 2 and result["located"] and not result["traceback"]
        and not left and not res.timed_out
    )  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return result


def rebuild(cluster, recipe) -> None:
    """Every machine of the cluster halted, re-created and made a cluster again by the
    README's block (after the head's GCS was killed)."""
    for i in (HEAD, *MEMBERS):
        cluster.halt(i)
        cluster.start(i)
    start_ray(cluster, recipe, head=HEAD, others=MEMBERS)
    want = sorted(cluster.address(i) for i in (HEAD, *MEMBERS))
    nodes = wait_for_nodes(cluster, recipe, want)
    if nodes != want:
        raise SystemExit(f"the cluster was not made again: live nodes {nodes}")


def restore(cluster, recipe, victim: int) -> None:
    """Machine ``victim`` halted (what a raylet kill left of it), re-created and joined."""
    cluster.halt(victim)
    cluster.start(victim)
    join(cluster, recipe, victim, HEAD)
    want = sorted(cluster.address(i) for i in (HEAD, *MEMBERS))
    nodes = wait_for_nodes(cluster, recipe, want)
    if nodes != want:
        raise SystemExit(f"machine {victim} did not rejoin: live nodes {nodes}")


YES = {True: "yes", False: "no", None: "-"}


def row(n: int, r: dict) -> str:
    head = f"{n:3d} {r['fault']:13s} {r['restarts']:8d}"
    if "error" in r:
        return f"{head}  not run: {r['error']}"
    equal = YES[r["equal"]]
    if r["rel_diff"] is not None:
        equal += " (bitwise)" if r["bitwise"] else f" ({r['rel_diff']:.1e})"
    return (
        f"{head} {r['exit']:5d} {YES[r['traceback']]:>9s} {YES[r['located']]:>7s} "
        f"{YES[r['names_checkpoint']]:>5s} {YES[bool(r['left'])]:>5s} "
        f"{YES[r['restarted']]:>9s} {YES[r['finished']]:>8s} {equal:>15s} "
        f"{YES[r['ok']]:>3s} {r['seconds']:6.1f}  m{r['victim']}  {r['message'][:160]}"
        + ("  (HUNG: killed)" if r.get("hung") else "")
        + (f"  left: {r['left']}" if r["left"] else "")
        + (f"  [{r['resume_note']}]" if r.get("resume_note") else "")
        + (
            f"  [resume from step {r['restart_step']}: exit {r['resume_exit']}, "
            f"{r['resume_seconds']:.1f} s]"
            if "resume_exit" in r
            else ""
        )
    )


def summary(plan: list, results: list[dict]) -> None:
    print("\nsummary")
    print(
        "fault         restarts  runs  exit codes         tracebacks  located  names ckpt  "
        "left  restarted  finished  equal to resume (largest rel. diff)  ok"
    )
    for kind, restarts in dict.fromkeys(plan):
        rs = [r for r in results if (r["fault"], r["restarts"]) == (kind, restarts)]
        done = [r for r in rs if "error" not in r]
        codes = ", ".join(f"{c}: {k}x" for c, k in sorted(Counter(r["exit"] for r in done).items()))
        stopped = [r for r in done if r["exit"] == 2]
        if kind.startswith("start: "):  # a failed start: located among all runs, no ckpt
            stopped = done
        resumed = [r for r in done if r["restarted"] and r["finished"]]
        diffs = [r["rel_diff"] for r in resumed if r["rel_diff"] is not None]
        equal = (
            f"{sum(bool(r['equal']) for r in resumed)}/{len(resumed)}"
            + (f" ({max(diffs):.1e})" if diffs else "")
            if restarts
            else "-"
        )
        print(
            f"{kind:13s} {restarts:8d} {len(rs):5d}  {codes or '-':18s} "
            f"{sum(r['traceback'] for r in done):10d} "
            f"{sum(r['located'] for r in stopped):4d}/{len(stopped):<3d} "
            + (
                f"{sum(bool(r['names_checkpoint']) for r in stopped):7d}/{len(stopped):<3d} "
                if not kind.startswith("start: ")
                else f"{'-':>11s} "
            )
            + f"{sum(bool(r['left']) for r in done):5d} "
            + (
                f"{sum(r['restarted'] for r in done):10d} {sum(r['finished'] for r in done):9d}"
                if restarts
                else f"{'-':>10s}{'-':>10s}"
            )
            + f"  {equal:35s} {sum(r['ok'] for r in done):2d}/{len(rs)}"
            + (f"  ({len(rs) - len(done)} not run)" if len(done) < len(rs) else "")
        )
    ok = sum(r.get("ok", False) for r in results)
    print(
        f"\nacceptance: {ok} of {len(results)} runs ended in exit 2 with a located message "
        "naming the newest checkpoint (a GCS kill: the head, within "
        f"{HEAD_LOSS_WITHIN:g} s), or in a restart that finished equal to a resume from "
        f"its checkpoint (within {EQUAL_WITHIN:g} relative), without a traceback or a "
        "segment left; a failed private start: exit 2, located, no Ray process left"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10, help="raylet kills per --max-restarts value")
    ap.add_argument("--halts", type=int, default=5, help="machine halts per --max-restarts value")
    ap.add_argument("--max-restarts", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--placement", default="spread")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--checkpoint-freq", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7, help="singa train --seed of every run")
    ap.add_argument("--timeout", type=float, default=300, help="seconds from a fault to the end")
    ap.add_argument("--gcs-kills", type=int, default=2,
                    help="kills of the head's gcs_server per --max-restarts value")  # fmt: skip
    ap.add_argument("--start-failures", type=int, default=2,
                    help="failed private starts, each of raylet and GCS stopped")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="one of each fault")
    args = ap.parse_args()
    if args.quick:
        args.kills, args.halts, args.gcs_kills, args.start_failures = 1, 1, 1, 1
    known = placements()
    if args.placement not in known:
        raise SystemExit(f"--placement {args.placement}: singa train takes {known}")
    if not 0 < args.checkpoint_freq < args.steps:
        raise SystemExit("--checkpoint-freq must be between 0 and --steps")
    recipe = emulated_machines_recipe()
    args.stores = mnist_stores()
    tmp = Path(tempfile.mkdtemp(prefix="singa-bench-ray-faults-"))
    plan = [
        (kind, restarts)
        for restarts in args.max_restarts
        for kind, count in (
            ("raylet kill", args.kills), ("halt", args.halts), ("gcs kill", args.gcs_kills)
        )
        for _ in range(count)
    ] + [
        (kind, 0) for kind in ("start: raylet", "start: gcs") for _ in range(args.start_failures)
    ]  # fmt: skip
    results = []
    t_all = time.monotonic()
    try:
        with EmulatedCluster(4) as cluster:
            t0 = time.monotonic()
            start_ray(cluster, recipe, head=HEAD, others=MEMBERS)
            print(
                f"3 emulated machines ({', '.join(cluster.address(i) for i in range(3))}; the "
                f"first is the head; {cluster.address(SPARE)} outside, for the failed "
                f"private starts), Ray by the README's block in {time.monotonic() - t0:.1f} "
                f"s; {args.steps} steps, a checkpoint every {args.checkpoint_freq}, --seed "
                f"{args.seed}, --placement {args.placement}; --max-restarts 0: Downpour 2x2; "
                "--max-restarts N > 0: 1 synchronous group of 2 workers (then a resume from "
                "the restart's checkpoint)\n"
            )
            print(
                "  # fault         restarts  exit traceback located  ckpt  left restarted "
                "finished equal to resume  ok   secs  on  message",
                flush=True,
            )
            for n, (kind, restarts) in enumerate(plan, 1):
                if kind.startswith("start: "):
                    r = start_failure_run(cluster, kind, tmp, n, args.timeout)
                    results.append(r)
                    print(row(n, r), flush=True)
                    continue
                r = one_run(cluster, recipe, args, kind, restarts, tmp, n)
                results.append(r)
                print(row(n, r), flush=True)
                if kind == "gcs kill":
                    rebuild(cluster, recipe)
                else:
                    restore(cluster, recipe, r["victim"] or MEMBERS[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary(plan, results)
    print(f"\n({load_average()} at the end; {time.monotonic() - t_all:.0f} s in all)")


if __name__ == "__main__":
    main()
