"""Faults on emulated machines during a Downpour run of the Ray engine: how every run ends.

    python benchmarks/ray_faults.py [--quick] [--kills 10] [--halts 5]
        [--max-restarts 0 1] [--placement spread] [--steps 40] [--checkpoint-freq 10]

Three machines, each with its own network, PID and mount namespaces on a bridge in a
namespace of its own (tests/engines/emulated_machines.py; nothing is added to the root
network namespace; needs root, unshare, nsenter, ip and tc), made into a Ray cluster by the
README's "## Two or more machines" block (token authentication on): machine 0 is the head
and runs ``singa train``; machines 1 and 2 join. The job is the README's (SINGA's MNIST MLP
as Downpour: 2 worker groups of 2 workers, 1 server group of 2 servers) with a checkpoint
every ``--checkpoint-freq`` steps. Once the first checkpoint is written, a fault hits the
first non-head machine the engine placed a process on:

* a raylet kill: SIGKILL to that machine's raylet (found in its PID namespace);
* a machine halt: SIGKILL to its PID namespace's PID 1 (every process on it dies at once).

Each fault runs once per ``--max-restarts`` value. Recorded per run: the exit code, whether
a Python traceback appeared, the first line of the message (the error, or the restart
note), whether it names the machine's address, whether ``singa-ray-*`` names of the run's
nodes were left in the shared /dev/shm, and (with restarts) whether the job finished all
its steps on the machines that remained. Between runs the machine is halted, re-created and
joins again, so every run starts on three nodes. A summary table closes.
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
import time
from collections import Counter
from pathlib import Path

from _common import REPO, load_average, machine_facts, mnist_stores

sys.path.insert(0, str(REPO))
from tests.engines.emulated_machines import (  # noqa: E402
    EmulatedCluster,
    join,
    live_nodes,
    namespace_problem,
    node_ids,
    placements,
    ray_segments,
    readme_recipe,
    segments_left,
    start_ray,
)

HEAD, MEMBERS = 0, (1, 2)


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


def one_run(cluster, recipe, args, kind: str, restarts: int, tmp: Path, n: int) -> dict:
    stores = args.stores
    ws = tmp / f"ws{n}"
    line = recipe.fill(recipe.train, cluster.address(HEAD))
    overrides = [
        f"train_steps={args.steps}", "test_steps=0", f"checkpoint_freq={args.checkpoint_freq}",
        "disp_freq=10", f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        f"cluster.workspace={ws}",
    ]  # fmt: skip
    line += "".join(f" -o {shlex.quote(o)}" for o in overrides)
    line += f" --placement {args.placement} --max-restarts {restarts}"
    out_path, err_path = tmp / f"out{n}", tmp / f"err{n}"
    before = ray_segments()
    first = ws / "checkpoint" / f"step{args.checkpoint_freq}-worker0"
    result = {"fault": kind, "restarts": restarts, "victim": None}
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
            if kind == "raylet kill":
                raylets = cluster.find(victim, "raylet")
                if len(raylets) != 1:
                    result["error"] = f"{len(raylets)} raylets on machine {victim}"
                    return result
                os.kill(raylets[0], signal.SIGKILL)
            else:
                cluster.halt(victim)
            t0 = time.monotonic()
            try:
                p.wait(timeout=args.timeout)
            except Exception:  # noqa: BLE001 - recorded as a hang
                result["hung"] = True
            result["seconds"] = time.monotonic() - t0
        finally:
            if p.poll() is None:
                cluster.stop(p)
                p.wait()
    stdout, stderr = out_path.read_text(), err_path.read_text()
    text = stdout + stderr
    result.update(
        exit=p.returncode,
        traceback="Traceback" in text,
        message=message_line(stderr),
        names_machine=address in message_line(stderr),
        restarted="restarting from the checkpoint" in stderr,
        left=sorted(segments_left(before, node_ids(text))),
        finished=p.returncode == 0 and f"finished at step {args.steps} " in text,
    )
    shutil.rmtree(ws, ignore_errors=True)
    return result


def restore(cluster, recipe, victim: int) -> None:
    """Machine ``victim`` halted (what a raylet kill left of it), re-created and joined."""
    cluster.halt(victim)
    cluster.start(victim)
    join(cluster, recipe, victim, HEAD)
    want = sorted(cluster.address(i) for i in (HEAD, *MEMBERS))
    nodes = wait_for_nodes(cluster, recipe, want)
    if nodes != want:
        raise SystemExit(f"machine {victim} did not rejoin: live nodes {nodes}")


def row(n: int, r: dict) -> str:
    head = f"{n:3d} {r['fault']:12s} {r['restarts']:8d}"
    if "error" in r:
        return f"{head}  not run: {r['error']}"
    yes = {True: "yes", False: "no"}
    return (
        f"{head} {r['exit']:5d} {yes[r['traceback']]:>9s} {yes[bool(r['left'])]:>5s} "
        f"{yes[r['restarted']]:>9s} {yes[r['finished']]:>8s} {r['seconds']:6.1f}  "
        f"m{r['victim']}  {r['message'][:160]}"
        + ("  (HUNG: killed)" if r.get("hung") else "")
        + (f"  left: {r['left']}" if r["left"] else "")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10, help="raylet kills per --max-restarts value")
    ap.add_argument("--halts", type=int, default=5, help="machine halts per --max-restarts value")
    ap.add_argument("--max-restarts", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--placement", default="spread")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--checkpoint-freq", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300, help="seconds from a fault to the end")
    ap.add_argument("--quick", action="store_true", help="one kill and one halt")
    args = ap.parse_args()
    if args.quick:
        args.kills, args.halts = 1, 1
    known = placements()
    if args.placement not in known:
        raise SystemExit(f"--placement {args.placement}: singa train takes {known}")
    if not 0 < args.checkpoint_freq < args.steps:
        raise SystemExit("--checkpoint-freq must be between 0 and --steps")
    facts = machine_facts(1)
    print("\n".join(facts[:-1]))  # the CPU, BLAS, ...; threads are each actor's own here
    print(f"load average at start {load_average().removeprefix('load average ')}")
    problem = namespace_problem()
    if problem:
        raise SystemExit(f"cannot emulate machines here: {problem}")
    recipe = readme_recipe()
    args.stores = mnist_stores()
    tmp = Path(tempfile.mkdtemp(prefix="singa-bench-ray-faults-"))
    plan = [
        (kind, restarts)
        for restarts in args.max_restarts
        for kind, count in (("raylet kill", args.kills), ("halt", args.halts))
        for _ in range(count)
    ]
    results = []
    try:
        with EmulatedCluster(3) as cluster:
            t0 = time.monotonic()
            start_ray(cluster, recipe, head=HEAD, others=MEMBERS)
            print(
                f"3 emulated machines ({', '.join(cluster.address(i) for i in range(3))}; the "
                f"first is the head), Ray by the README's block in {time.monotonic() - t0:.1f} "
                f"s; Downpour 2x2, {args.steps} steps, a checkpoint every "
                f"{args.checkpoint_freq}, --placement {args.placement}\n"
            )
            print(
                "  # fault        restarts  exit traceback  left restarted finished   secs  on  "
                "message",
                flush=True,
            )
            for n, (kind, restarts) in enumerate(plan, 1):
                r = one_run(cluster, recipe, args, kind, restarts, tmp, n)
                results.append(r)
                print(row(n, r), flush=True)
                restore(cluster, recipe, r["victim"] or MEMBERS[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nsummary")
    print(
        "fault        restarts  runs  exit codes         tracebacks  names machine  left  "
        "restarted  finished"
    )
    for kind, restarts in dict.fromkeys(plan):
        rs = [r for r in results if (r["fault"], r["restarts"]) == (kind, restarts)]
        done = [r for r in rs if "error" not in r]
        codes = ", ".join(f"{c}: {k}x" for c, k in sorted(Counter(r["exit"] for r in done).items()))
        print(
            f"{kind:12s} {restarts:8d} {len(rs):5d}  {codes or '-':18s} "
            f"{sum(r['traceback'] for r in done):10d} {sum(r['names_machine'] for r in done):14d} "
            f"{sum(bool(r['left']) for r in done):5d} "
            + (
                f"{sum(r['restarted'] for r in done):10d} {sum(r['finished'] for r in done):9d}"
                if restarts
                else "         -         -"
            )
            + (f"  ({len(rs) - len(done)} not run)" if len(done) < len(rs) else "")
        )
    print(f"\n({load_average()} at the end)")


if __name__ == "__main__":
    main()
