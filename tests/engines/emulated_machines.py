"""Machines emulated on one box, each with its own network stack, for the Ray engine's
multi-machine tests (tests/engines/test_ray_machines.py) and the scripts that measure on
them (benchmarks/ray_network.py, benchmarks/ray_faults.py). Not a test module.

Nothing is added to the root network namespace:

* the **world** is one process started with ``unshare -n``: its network namespace holds the
  bridge ``br0`` (``10.77.0.254/24``) that links the machines;
* a **machine** is a process started with ``unshare -n -p -f -m --mount-proc``: its own
  network, PID and mount namespaces, with a small reaper as PID 1. A veth pair is made in
  the world (one end on the bridge) and its other end moved into the machine by PID 1's
  pid, where it is ``eth0`` with ``10.77.0.<N+1>/24`` and a default route to the bridge
  (without a default route Ray binds 127.0.0.1). Its own PID namespace matters: a Ray
  driver finds "its" raylet by scanning processes. Each machine has its own HOME (so its
  own ``~/.ray/auth_token``), its own ``/tmp/ray`` (a per-machine folder bound there in
  its mount namespace; Ray's other nodes use the head's temp-dir path) and its own
  ``/dev/shm`` (a private tmpfs mounted there in its mount namespace, gone when the machine
  halts, as a reboot empties it): "no segment left on any machine" is checked machine by
  machine (:meth:`EmulatedCluster.segments`). The rest of the file system stays shared;
* a command runs on a machine through ``nsenter --target PID1 --net --pid --mount``;
* **halting** a machine is SIGKILL to its PID 1: the kernel kills every process of its PID
  namespace, and the namespace and its veth pair go with them;
* a link is shaped with ``tbf`` on both ends of the machine's veth pair (this kernel has no
  netem).

Teardown goes by handle only: the machines' PID 1s, then the world process.

The README's section "## Two or more machines" is the recipe the tests and the scripts
follow: :func:`readme_recipe` reads its ``bash`` block at run time.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUBNET = "10.77.0"
BRIDGE = "br0"
BRIDGE_ADDRESS = f"{SUBNET}.254"

# PID 1 of a machine: reaps whatever is orphaned in its PID namespace (Ray's daemons are)
REAPER = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.5)\n"
)

_TOOLS = ("unshare", "nsenter", "ip", "tc", "mount")

# what a probe namespace must allow: a bridge, a veth pair on it, a tbf qdisc
_PROBE = (
    "ip link set lo up && ip link add pbr type bridge && "
    "ip link add pv0 type veth peer name pv1 && ip link set pv0 master pbr && "
    "tc qdisc add dev pv1 root tbf rate 1gbit burst 128kb latency 50ms"
)


def namespace_problem() -> str | None:
    """Why machines cannot be emulated here (a skip reason), or None when they can."""
    if not sys.platform.startswith("linux"):
        return "needs Linux network and PID namespaces"
    if os.geteuid() != 0:
        return "needs root to create network and PID namespaces"
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (util-linux, iproute2)"
    probe = subprocess.run(
        ["unshare", "-n", "sh", "-c", _PROBE], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        why = probe.stderr.strip()
        return f"cannot make a bridge, veth pair and tbf qdisc in a namespace: {why}"
    probe = subprocess.run(
        ["unshare", "-n", "-p", "-f", "-m", "--mount-proc", "true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"cannot make network + PID + mount namespaces: {probe.stderr.strip()}"
    return None


def rate_bits(rate: str) -> float:
    """``1gbit`` / ``100mbit`` / ``10gbit`` / ``500kbit`` → bits per second."""
    m = re.fullmatch(r"([\d.]+)\s*([kmg]?)bit", rate.strip().lower())
    if not m:
        raise ValueError(f"rate {rate!r}: expected e.g. 100mbit, 1gbit, 10gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def _run(argv: list[str], *, timeout: float = 30, check: bool = True, **kw):
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def _net_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:  # gone, or not yet there
        return None


def wait_for_own_net_namespace(pid: int, timeout: float = 10) -> None:
    """Return once process ``pid`` (an ``unshare -n`` just started) is in a network namespace
    other than this process's. Until ``unshare`` has made its namespace, an ``nsenter -t
    pid -n`` acts on this machine's own network: under load a test once created its bridge
    here, on the host, that way."""
    mine = _net_namespace("self")
    deadline = time.monotonic() + timeout
    while _net_namespace(pid) in (None, mine):
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} (unshare -n) has no network namespace of its own")
        time.sleep(0.01)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # the command may hold spaces or parentheses: the fields after the last ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d.name))
    return out


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


_LIVE: list = []  # the clusters made and not yet closed (ray_segments looks at them all)


@dataclass
class Machine:
    index: int
    address: str
    home: Path
    ray_tmp: Path
    proc: subprocess.Popen | None = None  # the `unshare` process; PID 1 is its child
    pid1: int = 0
    rate: str | None = None
    started: list = field(default_factory=list)  # Popen handles of commands run on it

    @property
    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def veth(self) -> str:  # the world's end of its link
        return f"m{self.index}w"


class EmulatedCluster:
    """``n`` emulated machines on one bridge (a context manager). Machine ``i`` has the
    address ``10.77.0.<i+1>``; every method takes the machine's index."""

    def __init__(self, n: int, *, base: str | Path | None = None) -> None:
        if n < 1 or n > 200:
            raise ValueError("1 to 200 machines")
        self.base = Path(tempfile.mkdtemp(prefix="singa-machines-", dir=base))
        self.world: subprocess.Popen | None = None
        _LIVE.append(self)
        self.machines = [
            Machine(i, f"{SUBNET}.{i + 1}", self.base / f"m{i}" / "home",
                    self.base / f"m{i}" / "ray")
            for i in range(n)
        ]  # fmt: skip

    # -- life --------------------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        try:
            self.world = subprocess.Popen(
                ["unshare", "-n", "--", "sleep", "infinity"], stdin=subprocess.DEVNULL
            )
            wait_for_own_net_namespace(self.world.pid)
            self._world("ip link set lo up")
            self._world(f"ip link add {BRIDGE} type bridge")
            self._world(f"ip addr add {BRIDGE_ADDRESS}/24 dev {BRIDGE}")
            self._world(f"ip link set {BRIDGE} up")
            for m in self.machines:
                self.start(m.index)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Halt every machine, end the world process (by handle) and remove the folders."""
        for m in self.machines:
            self.halt(m.index)
        if self.world is not None:
            if self.world.poll() is None:
                self.world.kill()
            self.world.wait(timeout=30)
            self.world = None
        shutil.rmtree(self.base, ignore_errors=True)
        if self in _LIVE:
            _LIVE.remove(self)

    def _world(self, command: str, check: bool = True):
        assert self.world is not None and self.world.poll() is None, "the world is not up"
        # never this machine's own network (wait_for_own_net_namespace)
        assert _net_namespace(self.world.pid) != _net_namespace("self"), "the world is the host"
        argv = ["nsenter", "-t", str(self.world.pid), "-n", "--", *shlex.split(command)]
        return _run(argv, check=check)

    def start(self, i: int) -> None:
        """Create machine ``i`` (again, after a halt: same address, same HOME)."""
        m = self.machines[i]
        if m.up:
            raise RuntimeError(f"machine {i} is already up")
        m.home.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(m.ray_tmp, ignore_errors=True)  # a fresh /tmp/ray, as after a reboot
        m.ray_tmp.mkdir(parents=True)
        # unshare's own stderr (it says "sigprocmask unblock failed" when PID 1 is killed)
        with open(m.home.parent / "unshare.log", "a") as log:
            m.proc = subprocess.Popen(
                ["unshare", "-n", "-p", "-f", "-m", "--mount-proc", "--",
                 sys.executable, "-c", REAPER],
                stdin=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        m.rate = None
        deadline = time.monotonic() + 10
        while True:
            kids = _children(m.proc.pid)
            if kids:
                m.pid1 = kids[0]
                break
            if m.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"machine {i} did not start (unshare: {m.proc.poll()})")
            time.sleep(0.02)
        # its own /tmp/ray (Ray's default temp dir), in its own mount namespace only
        Path("/tmp/ray").mkdir(exist_ok=True)
        self._in(m, ["-m"], ["mount", "--bind", str(m.ray_tmp), "/tmp/ray"])
        # its own /dev/shm (Ray's object store and singa's segments): a private tmpfs
        self._in(m, ["-m"], ["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm"])
        # the link: made in the world, one end moved into the machine by PID 1's pid
        self._world(f"ip link del {m.veth}", check=False)  # a halted machine's, if still there
        self._world(f"ip link add {m.veth} type veth peer name m{i}x")
        self._world(f"ip link set m{i}x netns {m.pid1}")
        self._world(f"ip link set {m.veth} master {BRIDGE} up")
        for cmd in (
            "ip link set lo up",
            f"ip link set m{i}x name eth0",
            f"ip addr add {m.address}/24 dev eth0",
            "ip link set eth0 up",
            f"ip route add default via {BRIDGE_ADDRESS}",
        ):
            self._in(m, ["-n"], shlex.split(cmd))

    def halt(self, i: int) -> None:
        """SIGKILL machine ``i``'s PID 1: every process on it dies at once, as with a
        power cut; its network namespace and link go with them."""
        m = self.machines[i]
        if m.proc is None:
            return
        if m.proc.poll() is None and m.pid1:
            try:
                os.kill(m.pid1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait(timeout=30)
        for p in m.started:  # the nsenter processes of commands that ran on it
            if p.poll() is None:
                p.kill()
            p.wait()
        m.proc, m.pid1, m.started = None, 0, []

    # -- facts -------------------------------------------------------------------------------
    def address(self, i: int) -> str:
        return self.machines[i].address

    def home(self, i: int) -> Path:
        return self.machines[i].home

    def pid1(self, i: int) -> int:
        return self.machines[i].pid1

    def processes(self, i: int) -> dict[int, list[str]]:
        """pid (as seen from here) -> command line, for every process of machine ``i``."""
        m = self.machines[i]
        ns = _pid_namespace(m.pid1) if m.up else None
        if ns is None:
            return {}
        out = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and _pid_namespace(int(d.name)) == ns:
                cmd = _cmdline(int(d.name))
                if cmd:  # not a zombie
                    out[int(d.name)] = cmd
        return out

    def segments(self, i: int | None = None) -> set[str]:
        """The Ray engine's names (``singa-ray-*``) in machine ``i``'s own /dev/shm (read
        through its PID 1's root, in its mount namespace), as ``m<i>:<name>``; with no
        ``i``, those of every machine that is up."""
        if i is None:
            return {n for m in self.machines if m.up for n in self.segments(m.index)}
        m = self.machines[i]
        if not m.up:
            return set()
        try:
            names = os.listdir(f"/proc/{m.pid1}/root/dev/shm")
        except OSError:
            return set()
        return {f"m{i}:{n}" for n in names if n.startswith("singa-ray-")}

    def find(self, i: int, program: str) -> list[int]:
        """Pids (as seen from here) of machine ``i``'s processes whose program (argv[0])
        is ``program`` or ends with ``/program``."""
        return [
            pid for pid, cmd in self.processes(i).items()
            if cmd[0] == program or cmd[0].endswith("/" + program)
        ]  # fmt: skip

    # -- commands ----------------------------------------------------------------------------
    def env(self, i: int, extra: dict | None = None) -> dict[str, str]:
        """A clean environment for machine ``i``: this Python's bin first on PATH, its own
        HOME, SINGA_DATA; then ``extra``."""
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]),
            "HOME": str(self.machines[i].home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }  # fmt: skip
        for key in ("SINGA_DATA", "VIRTUAL_ENV"):
            if key in os.environ:
                env[key] = os.environ[key]
        env.update(extra or {})
        return env

    def _argv(self, i: int, cmd, cwd: str | Path | None) -> list[str]:
        m = self.machines[i]
        if not m.up:
            raise RuntimeError(f"machine {i} is halted")
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        return ["nsenter", "-t", str(m.pid1), "-n", "-p", "-m",
                f"--wd={cwd or REPO}", "--", *argv]  # fmt: skip

    def _in(self, m: Machine, spaces: list[str], argv: list[str]):
        return _run(["nsenter", "-t", str(m.pid1), *spaces, "--", *argv])

    def popen(self, i: int, cmd, *, env: dict | None = None, cwd=None, **kw) -> subprocess.Popen:
        """Start ``cmd`` (a shell line, or an argv list) on machine ``i``; text pipes for
        stdout and stderr unless given. Its own session (see :meth:`stop`)."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("text", True)
        p = subprocess.Popen(
            self._argv(i, cmd, cwd), env=self.env(i, env), start_new_session=True, **kw
        )
        self.machines[i].started.append(p)
        return p

    @staticmethod
    def stop(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the process group of a command started with :meth:`popen` (nsenter and
        the command it forked inside the machine)."""
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def run(self, i: int, cmd, *, env: dict | None = None, cwd=None, timeout: float = 120,
            check: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
        """Run ``cmd`` on machine ``i`` to its end (killed, with its process group, after
        ``timeout`` seconds: then the return code is the kill's, and ``timed_out`` is set).
        ``cpu`` is the CPU seconds (user + system) the command and the children it waited
        for used: unlike its wall time, barely moved by the load of other processes (while
        no other thread of this process waits for a child at the same time)."""
        before = _children_cpu()
        p = self.popen(i, cmd, env=env, cwd=cwd)
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(p)
            out, err = p.communicate()
        finally:
            if p in self.machines[i].started:
                self.machines[i].started.remove(p)
        res = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        res.timed_out = timed_out
        res.cpu = _children_cpu() - before
        if check and res.returncode != 0:
            raise RuntimeError(
                f"on machine {i}: {cmd!r} failed ({res.returncode}):\n{out[-3000:]}\n{err[-3000:]}"
            )
        return res

    # -- links -------------------------------------------------------------------------------
    def link_bytes(self, i: int) -> tuple[int, int]:
        """(received, sent) bytes so far of machine ``i``'s eth0 (its namespace's
        /proc/net/dev, read through its PID 1)."""
        text = Path(f"/proc/{self.machines[i].pid1}/net/dev").read_text()
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                f = rest.split()
                return int(f[0]), int(f[8])
        raise RuntimeError(f"machine {i} has no eth0")

    def shape(self, i: int, rate: str | None) -> None:
        """Limit machine ``i``'s link to ``rate`` (e.g. ``1gbit``) both ways with tbf, or
        lift the limit (None)."""
        m = self.machines[i]
        if rate is None:
            self._world(f"tc qdisc del dev {m.veth} root", check=False)
            _run(["nsenter", "-t", str(m.pid1), "-n", "--", "tc", "qdisc", "del", "dev",
                  "eth0", "root"], check=False)  # fmt: skip
            m.rate = None
            return
        bits = rate_bits(rate)
        burst = max(int(bits / 8 / 100), 64 * 1024)  # 10 ms of traffic, at least 64 KiB
        spec = f"root tbf rate {rate} burst {burst} latency 100ms"
        self._world(f"tc qdisc replace dev {m.veth} {spec}")
        self._in(m, ["-n"], ["tc", "qdisc", "replace", "dev", "eth0", *spec.split()])
        m.rate = rate


# -- the README's recipe ---------------------------------------------------------------------
SECTION = "## Two or more machines"


@dataclass
class Recipe:
    """The lines of the README's two-machine block, by role (placeholders unfilled)."""

    env: dict[str, str]  # the `export` line
    token: str  # on the head: make the token
    head: str  # on the head: ray start --head
    join: str  # on every other machine: ray start --address
    train: str  # on the head: singa train
    lines: list[str]

    @staticmethod
    def fill(line: str, head_ip: str, this_ip: str | None = None) -> str:
        line = line.replace("HEAD_IP", head_ip)
        return line.replace("THIS_IP", this_ip) if this_ip else line

    def port(self) -> int:
        m = re.search(r"--port[ =](\d+)", self.head)
        return int(m.group(1)) if m else 6379


def readme_recipe(readme: Path = REPO / "README.md") -> Recipe:
    """The ``bash`` block under "## Two or more machines" in README.md, split by role;
    raises AssertionError naming what is missing when the README no longer has it."""
    text = readme.read_text()
    at = text.find(SECTION)
    assert at >= 0, f"README.md has no section {SECTION!r}"
    m = re.search(r"```bash\n(.*?)```", text[at:], re.S)
    assert m, f"README.md's section {SECTION!r} has no ```bash block"
    lines = [x.strip() for x in m.group(1).splitlines()]
    lines = [x for x in lines if x and not x.startswith("#")]
    env: dict[str, str] = {}
    roles: dict[str, str] = {}
    for line in lines:
        if line.startswith("export "):
            for pair in shlex.split(line)[1:]:
                key, _, value = pair.partition("=")
                env[key] = value
        elif "get-auth-token" in line:
            roles["token"] = line
        elif line.startswith("ray start") and "--head" in line:
            roles["head"] = line
        elif line.startswith("ray start") and "--address" in line:
            roles["join"] = line
        elif line.startswith("singa train"):
            roles["train"] = line
    missing = [r for r in ("token", "head", "join", "train") if r not in roles]
    assert not missing, f"README.md's two-machine block lacks the {missing} line(s):\n{m.group(1)}"
    return Recipe(env=env, lines=lines, **roles)


def copy_token(cluster: EmulatedCluster, head: int, to: int) -> None:
    """The head's ~/.ray/auth_token into machine ``to``'s HOME (the README's "copy that
    file to every other machine")."""
    src = cluster.home(head) / ".ray" / "auth_token"
    dst = cluster.home(to) / ".ray" / "auth_token"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    dst.chmod(0o600)


def start_ray(cluster: EmulatedCluster, recipe: Recipe, head: int = 0,
              others: tuple[int, ...] = (1,), timeout: float = 120) -> None:  # fmt: skip
    """The README's block on the machines: the token on the head, copied to ``others``,
    ``ray start --head`` on the head and ``ray start --address`` on each of ``others``."""
    ip = cluster.address(head)
    cluster.run(head, recipe.fill(recipe.token, ip), env=recipe.env, timeout=60, check=True)
    cluster.run(head, recipe.fill(recipe.head, ip, ip), env=recipe.env, timeout=timeout,
                check=True)  # fmt: skip
    for i in others:
        join(cluster, recipe, i, head, timeout=timeout)


def join(cluster: EmulatedCluster, recipe: Recipe, i: int, head: int = 0,
         timeout: float = 120) -> None:  # fmt: skip
    """Machine ``i`` joins the head's cluster the README's way (token copied first)."""
    copy_token(cluster, head, i)
    line = recipe.fill(recipe.join, cluster.address(head), cluster.address(i))
    cluster.run(i, line, env=recipe.env, timeout=timeout, check=True)


NODES_SCRIPT = (
    "import json, logging, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)\n"
    "alive = sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])\n"
    "print('NODES ' + json.dumps(alive))\n"
)


def live_nodes(cluster: EmulatedCluster, recipe: Recipe, head: int = 0,
               timeout: float = 60) -> list[str]:  # fmt: skip
    """The addresses of the cluster's live nodes, asked from the head as a Ray driver."""
    import json

    address = f"{cluster.address(head)}:{recipe.port()}"
    res = cluster.run(head, [sys.executable, "-c", NODES_SCRIPT, address], env=recipe.env,
                      timeout=timeout, check=True)  # fmt: skip
    # Ray may print warnings on stdout too
    line = next(x for x in res.stdout.splitlines() if x.startswith("NODES "))
    return json.loads(line[len("NODES ") :])


def wait_nodes(cluster, recipe, count: int, head: int = 0, timeout: float = 60) -> list[str]:
    """Wait until the cluster has ``count`` live nodes; their addresses."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = live_nodes(cluster, recipe, head)
        if len(nodes) == count or time.monotonic() > deadline:
            return nodes
        time.sleep(1)


# -- singa train's output --------------------------------------------------------------------
FINISHED = re.compile(r"finished at step (\d+) .*?\((\d+) steps, ([\d.]+) ms/step\)")
_MB = r"([\d.]+(?:e[-+]?\d+)?) MB"  # 95.8, 0.734, 1e-05
TRAFFIC = re.compile(
    rf"parameters between nodes: {_MB} of gradients, {_MB} of values(?:, {_MB} of syncs)?"
)


def step_ms(output: str) -> tuple[int, float] | None:
    """(steps, ms/step) from singa's closing line."""
    m = FINISHED.search(output)
    return (int(m.group(2)), float(m.group(3))) if m else None


def crossed_mb(output: str) -> float | None:
    """MB of parameters (gradients + values) that crossed between nodes, from the closing
    ``ray:`` note (None when the note is absent: nothing crossed)."""
    m = TRAFFIC.search(output)
    return sum(float(g) for g in m.groups() if g) if m else None


def placements() -> list[str]:
    """The values ``singa train --placement`` takes, from its help (``--placement a|b|c``)."""
    res = _run([sys.executable, "-m", "singa_core.commands.cli", "train", "--help"], cwd=REPO)
    m = re.search(r"--placement\s+([a-z]+(?:\|[a-z]+)*)", res.stdout)
    if not m:
        raise RuntimeError(f"singa train --help names no --placement values:\n{res.stdout}")
    return m.group(1).split("|")


def ray_segments(cluster: EmulatedCluster | None = None) -> set[str]:
    """The Ray engine's names in every machine's own /dev/shm, as ``m<i>:<name>``: the
    machines of ``cluster``, or (None) of every cluster that is up, and this box's own
    /dev/shm (names without a machine)."""
    if cluster is not None:
        return cluster.segments()
    out = {n for c in list(_LIVE) for n in c.segments()}
    try:
        out |= {n for n in os.listdir("/dev/shm") if n.startswith("singa-ray-")}
    except OSError:
        pass
    return out


def node_ids(output: str) -> set[str]:
    """The (12-digit) Ray node ids singa's output names."""
    return set(re.findall(r"\((?:Ray )?node ([0-9a-f]{12})", output))


def segments_left(before: set[str], nodes: set[str] | None = None, grace: float = 5.0,
                  cluster: EmulatedCluster | None = None) -> set[str]:  # fmt: skip
    """The Ray engine's names made since ``before`` (:func:`ray_segments`, of ``cluster`` or
    of every cluster that is up) that are still in some machine's /dev/shm after ``grace``
    seconds (a job's processes may hold theirs for a moment). With ``nodes`` (12-digit Ray
    node ids), only names of those nodes (``singa-ray-<node>-<pid>-...``)."""

    def ours(name: str) -> bool:
        return not nodes or name.split(":", 1)[-1][len("singa-ray-") :].split("-")[0] in nodes

    deadline = time.monotonic() + grace
    while True:
        left = {n for n in ray_segments(cluster) - before if ours(n)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def singa_runner(cluster: EmulatedCluster, recipe: Recipe, cwd: Path, timeout: float = 180):
    """``singa(i, *args, env=None, timeout=...)``: the ``singa`` command on machine ``i`` with
    the recipe's environment (plus ``env``); its result carries ``took`` (wall seconds) and
    ``cpu`` (CPU seconds, see :meth:`EmulatedCluster.run`), the tail
    of its output is printed, and it must not end in a traceback."""

    def singa(i: int, *args: str, env: dict | None = None, timeout: float = timeout):
        t0 = time.monotonic()
        res = cluster.run(i, ["singa", *args], env={**recipe.env, **(env or {})}, cwd=cwd,
                          timeout=timeout)  # fmt: skip
        res.took = time.monotonic() - t0
        print(f"machine {i}: singa {' '.join(args)} -> {res.returncode} in {res.took:.1f} s "
              f"({res.cpu:.1f} s CPU)\n"
              f"{res.stdout[-1200:]}{res.stderr[-1200:]}")  # fmt: skip
        assert "Traceback" not in res.stdout + res.stderr
        return res

    return singa


def prompt(singa, machine: int, *args: str, margin: float, repeatable: bool = True,
           tries: int = 3, baseline: tuple[str, ...] = ("list-plugins",),
           ) -> subprocess.CompletedProcess:  # fmt: skip
    """``singa(machine, *args)``, asserted to take no longer than the machine's own start-up
    (``singa *baseline`` there, by default ``list-plugins``, timed beside it under the same
    load; a command that talks to a head may take as its baseline one that only reads from
    it, whose own promptness is checked apart) plus ``margin``:
    a command that waits on something (a connection timeout, a retry) is over that bound
    every time. Other processes' load (CI runs other tests beside this one, and a second CI
    run may share the machine) moves one wall time by many seconds, so a try over the
    bound is repeated, start-up and command interleaved, up to ``tries``, and the fastest
    command is compared with the fastest start-up. A command that is not ``repeatable``
    (it changes something) runs once, between two start-ups, and is compared with the
    slower of the two. Returns the command's last result."""
    startups, results = [], []
    for _ in range(tries if repeatable else 1):
        startups.append(singa(machine, *baseline).took)
        results.append(singa(machine, *args))
        if not repeatable:
            startups.append(singa(machine, *baseline).took)
            bound = max(startups)
        else:
            bound = min(startups)
        took = min(r.took for r in results)
        if took < bound + margin:
            return results[-1]
    raise AssertionError(
        f"singa {' '.join(args)} took {[round(r.took, 1) for r in results]} s against "
        f"start-ups of {[round(t, 1) for t in startups]} s + {margin} s"
    )


def job_record(singa, machine: int, head: str, job: str) -> dict:
    """Job ``job``'s record as ``singa jobs --address HEAD --json`` on ``machine`` shows it."""
    res = singa(machine, "jobs", "--address", head, "--json")
    assert res.returncode == 0, res.stderr
    (rec,) = [r for r in json.loads(res.stdout) if r["id"] == job]
    return rec
