"""Who may use a Ray cluster: singa's check before it joins one, and the private
runtime's own token.

A Ray cluster started with ``RAY_AUTH_MODE=token`` checks a token on every call to its GCS
and nodes (it does not encrypt). Without it, anyone who reaches the cluster's ports can
run code on its nodes. Before ``ray.init`` joins a cluster, :func:`check_cluster` opens a
TCP connection to the cluster's GCS (``CONNECT_TIMEOUT``) and asks it for its cluster id
over gRPC (``NodeInfoGcsService.GetClusterId``; every GCS call is protected), first
without a token and, when that is refused, with the token this process would send. Every
outcome but "the cluster checks tokens and accepts ours" is a SingaError saying what is
missing — nothing answers; this process sends no token (``RAY_AUTH_MODE=token`` not
exported) or has none (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``);
the cluster refuses the token — and a cluster that checks no tokens is refused unless the
user says ``--insecure`` (then a warning). The classification (:func:`classify`) takes the
question to the GCS as a function, so it is tested without a cluster.

The private runtime (no ``--address``) gets a random token of its own (:class:`PrivateToken`),
handed only through the environment to the processes ``ray.init`` starts and restored
afterwards: Ray's own ``ray.init()`` would write ``~/.ray/auth_token``, after which a plain
``ray start --head`` on the machine turns token authentication on by itself.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from singa_core.errors import SingaError

AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
TOKEN_PLACES = "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
CONNECT_TIMEOUT = 2.5  # seconds for the TCP connection to the GCS (nothing answers: an error)
ANSWER_TIMEOUT = 10.0  # seconds for the GCS's answer once connected
WHERE = "--address"

SECURE_RECIPE = (
    "export RAY_AUTH_MODE=token on every node and here; on the head run "
    "`ray get-auth-token --generate` once and copy its ~/.ray/auth_token to every machine; "
    "restart the nodes (`ray start ...`). Or pass --insecure to use this cluster as it is"
)
COPY_TOKEN = (
    "copy the head's ~/.ray/auth_token to this machine's ~/.ray/auth_token (or point "
    "RAY_AUTH_TOKEN_PATH at a copy, or put its text in RAY_AUTH_TOKEN)"
)


@dataclass(frozen=True)
class Credentials:
    """What this process would show a cluster, as ``ray.init(address=...)`` decides it."""

    mode: str | None  # RAY_AUTH_MODE as exported (lower case); None: not exported
    sends_token: bool  # whether ray.init will use token authentication
    token: str | None  # the token it would send (None: none found)
    source: str  # where the token is from, or why none was found

    def header(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def local_credentials(
    address: str | None, env: Mapping[str, str] | None = None, home: Path | None = None
) -> Credentials:
    """The token mode and token of this process for ``ray.init(address=address)``.

    Ray's order: ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names (which must
    be readable and not empty), else ``~/.ray/auth_token``; surrounding whitespace is not
    part of a token. With ``RAY_AUTH_MODE`` not exported, Ray turns token mode on only for
    ``address`` ``auto`` when a token is found."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    raw_mode = env.get("RAY_AUTH_MODE")
    mode = raw_mode.strip().lower() if raw_mode is not None else None
    token, source = _find_token(env, home)
    if mode is None:
        sends = address == "auto" and token is not None
    else:
        sends = mode == "token"
    return Credentials(mode, sends, token, source)


def _find_token(env: Mapping[str, str], home: Path) -> tuple[str | None, str]:
    text = (env.get("RAY_AUTH_TOKEN") or "").strip()
    if text:
        return text, "RAY_AUTH_TOKEN"
    path_var = env.get("RAY_AUTH_TOKEN_PATH") or ""
    if path_var:
        try:
            text = Path(path_var).read_text(encoding="utf-8", errors="replace").strip()
        except OSError as exc:
            return None, f"RAY_AUTH_TOKEN_PATH names {path_var}, which cannot be read ({_why(exc)})"
        if not text:
            return None, f"RAY_AUTH_TOKEN_PATH names {path_var}, which is empty"
        return text, f"RAY_AUTH_TOKEN_PATH ({path_var})"
    default = home / ".ray" / "auth_token"
    unset = "RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are not set and"
    try:
        text = default.read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None, f"{unset} {default} does not exist"
    except OSError as exc:
        return None, f"{unset} {default} cannot be read ({_why(exc)})"
    if not text:
        return None, f"{unset} {default} is empty"
    return text, str(default)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# -- asking the GCS -------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """How the GCS answered one call: ``ok``, ``unauthenticated``, ``unreachable`` or
    ``other`` (``detail`` says what)."""

    kind: str
    detail: str = ""


def connect_problem(address: str, timeout: float | None = None) -> str | None:
    """Why no TCP connection to ``address`` (HOST:PORT) could be made, or None (within
    :data:`CONNECT_TIMEOUT` scaled by this machine's slowdown unless ``timeout``)."""
    from singa_builtins.engines.ray.machine import scaled

    timeout = scaled(CONNECT_TIMEOUT, cap=15.0) if timeout is None else timeout
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SingaError(
            f"the address {address!r} is not HOST:PORT",
            where=WHERE,
            help="--address HEAD_IP:6379 (the head's GCS port, `ray start --head --port`), "
            "or auto for a cluster started on this machine",
        )
    return host, int(port)


def ask_gcs(address: str, creds: Credentials | None, timeout: float | None = None) -> Answer:
    """Ask the GCS at ``address`` for its cluster id, with ``creds``' token (None: without
    one), within :data:`ANSWER_TIMEOUT` scaled by this machine's slowdown unless
    ``timeout``."""
    from singa_builtins.engines.ray.machine import scaled

    timeout = scaled(ANSWER_TIMEOUT, cap=60.0) if timeout is None else timeout
    try:
        import grpc
    except ImportError:  # the ray extra brings it; Ray itself does not require it
        raise SingaError(
            "the ray engine's cluster check needs grpcio, which is not installed",
            where=WHERE,
            help="install the ray extra again: pip install 'singa-classic[ray]' "
            "(or pip install grpcio)",
        ) from None
    from ray._private.ray_constants import GLOBAL_GRPC_OPTIONS
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    metadata = creds.header() if creds is not None else ()
    options = [("grpc.enable_retries", 0), *GLOBAL_GRPC_OPTIONS]  # http proxy: as Ray's own
    with grpc.insecure_channel(address, options=options) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=metadata or None
            )
        except grpc.RpcError as exc:
            code, detail = exc.code(), (exc.details() or "").strip()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return Answer("unauthenticated", detail)
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return Answer("unreachable", f"{code.name}: {detail}" if detail else code.name)
            return Answer("other", f"{code.name}: {detail}" if detail else code.name)
    return Answer("ok")


def _ask_answering(gcs: str, shown: str, creds: Credentials | None) -> Answer:
    """:func:`ask_gcs` of a GCS that took a TCP connection a moment ago: a call that gets
    no answer in time is tried once more, and a GCS that still takes connections is then
    slow (a loaded head), not gone: said so, never "nothing answers"."""
    answer = ask_gcs(gcs, creds)
    if answer.kind != "unreachable":
        return answer
    again = ask_gcs(gcs, creds)
    if again.kind != "unreachable" or connect_problem(gcs) is not None:
        return again
    from singa_builtins.engines.ray.machine import scaled

    raise SingaError(
        f"the Ray cluster's GCS at {shown} takes connections but did not answer a call within "
        f"{scaled(ANSWER_TIMEOUT, cap=60.0):.0f} s, twice ({again.detail})",
        where=WHERE,
        help="the head is overloaded or its GCS is stuck: `ray status` on the head, then try again",
    )


# -- what the answers mean -------------------------------------------------------------------
def unreachable_error(address: str, detail: str) -> SingaError:
    err = SingaError(
        f"nothing answers at {address} (the Ray cluster's GCS): {detail}",
        where=WHERE,
        help="check the address (the head's IP and its `ray start --head --port`, default "
        "6379), that the head is running (`ray start --head` on it), and that no firewall "
        "blocks the port between this machine and the head",
    )
    err.unreachable = True  # the console lists this machine's jobs there as unknown
    return err


def classify(
    address: str, creds: Credentials, ask: Callable[[Credentials | None], Answer], insecure: bool
) -> str | None:
    """Whether this process may join the cluster at ``address``: None (it checks tokens and
    takes ours), a warning (it checks none and ``insecure``), else a SingaError."""
    first = ask(None)
    if first.kind == "ok":
        if insecure:
            return (
                f"warning: the Ray cluster at {address} checks no tokens (--insecure): anyone "
                "who reaches its ports can run code on its nodes"
            )
        raise SingaError(
            f"the Ray cluster at {address} does not check tokens: anyone who reaches its "
            "ports can run code on its nodes, so singa does not use it",
            where=WHERE,
            help=SECURE_RECIPE,
        )
    if first.kind == "unreachable":
        raise unreachable_error(address, first.detail)
    if first.kind != "unauthenticated":
        raise _not_a_gcs(address, first.detail)
    # the cluster checks tokens
    if not creds.sends_token:
        if creds.mode is None:
            why = "RAY_AUTH_MODE=token is not exported"
        else:
            why = f"RAY_AUTH_MODE is {creds.mode!r}, not 'token'"
        has = (
            f"a token is in {creds.source}, but Ray sends it only with RAY_AUTH_MODE=token"
            if creds.token is not None
            else f"and no token was found ({creds.source})"
        )
        raise SingaError(
            f"the Ray cluster at {address} requires token authentication, and this process "
            f"would connect without a token: {why}; {has}",
            where=WHERE,
            help="export RAY_AUTH_MODE=token"
            + ("" if creds.token is not None else f", and {COPY_TOKEN}"),
        )
    if creds.token is None:
        raise SingaError(
            f"the Ray cluster at {address} requires token authentication and "
            f"RAY_AUTH_MODE=token is set, but this process has no token ({TOKEN_PLACES}): "
            f"{creds.source}",
            where=WHERE,
            help=COPY_TOKEN,
        )
    second = ask(creds)
    if second.kind == "ok":
        return None
    if second.kind == "unauthenticated":
        raise SingaError(
            f"the cluster refused this machine's token (from {creds.source}): the Ray "
            f"cluster at {address} was started with another one",
            where=WHERE,
            help=COPY_TOKEN + "; every node and this machine need the same token",
        )
    if second.kind == "unreachable":
        raise unreachable_error(address, second.detail)
    raise _not_a_gcs(address, second.detail)


def _not_a_gcs(address: str, detail: str) -> SingaError:
    return SingaError(
        f"something answers at {address}, but not as a Ray cluster's GCS ({detail})",
        where=WHERE,
        help="--address names the head's GCS port: the --port of `ray start --head` "
        "(default 6379), not a node manager, object manager or dashboard port",
    )


# -- the address ---------------------------------------------------------------------------
def resolve_address(address: str) -> str:
    """The GCS address HOST:PORT that ``ray.init(address=address)`` joins (``auto``: the
    cluster ``ray start`` made on this machine), found as Ray finds it."""
    from ray._private import services

    try:
        found = services.canonicalize_bootstrap_address(address)
    except ConnectionError as exc:
        raise SingaError(
            f"--address {address}: no Ray cluster was found on this machine ({exc})",
            where=WHERE,
            help="pass the head's address, --address HEAD_IP:6379, or start a cluster here "
            "with `ray start --head`",
        ) from None
    except ValueError:
        split_address(address)  # raises the located error
        raise
    if found is None:  # "local": not a cluster
        raise SingaError(
            f"--address {address} names no cluster",
            where=WHERE,
            help="leave --address out for a private one-node runtime, or pass HEAD_IP:6379",
        )
    split_address(found)
    return found


def check_cluster(address: str, insecure: bool) -> str | None:
    """Before ``ray.init(address=address)``: None or a warning to print when the cluster
    may be joined; a SingaError naming what is missing when not (see the module)."""
    gcs = resolve_address(address)
    shown = address if address == gcs else f"{address} ({gcs})"
    problem = connect_problem(gcs)
    if problem is not None:
        raise unreachable_error(shown, problem)
    creds = local_credentials(address)
    warning = classify(shown, creds, lambda c: _ask_answering(gcs, shown, c), insecure)
    exposed = token_file_exposure(creds)
    return "\n".join(w for w in (exposed, warning) if w) or None


def token_file_exposure(creds: Credentials) -> str | None:
    """A warning when the file the token was read from can be read by other users of this
    machine (``ray get-auth-token --generate`` leaves it mode 0644): anyone who reads it
    can run code on every node of the cluster."""
    if not creds.sends_token or creds.token is None or creds.source == "RAY_AUTH_TOKEN":
        return None
    path = Path(creds.source.split("(", 1)[1].rstrip(")") if "(" in creds.source else creds.source)
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (
        f"warning: the Ray token file {path} can be read by other users (mode {mode:04o}): "
        f"whoever reads it can run code on every node of the cluster; chmod 600 {path}"
    )


# -- the private runtime's token ---------------------------------------------------------------
def refresh_ray_auth() -> None:
    """Make this process's Ray see the current RAY_AUTH_* environment (Ray caches the mode
    in its config and the token in its loader); the config first, as Ray's own tests do."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # a Ray without token authentication
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


class PrivateToken:
    """RAY_AUTH_MODE=token and a fresh random RAY_AUTH_TOKEN in this process's environment
    (RAY_AUTH_TOKEN_PATH unset) while a private runtime starts and runs: its processes
    inherit them, nothing is written to disk. ``restore`` puts the user's variables back."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def install(self) -> None:
        self._saved = {k: os.environ.get(k) for k in AUTH_VARS}
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        refresh_ray_auth()

    def restore(self) -> None:
        if self._saved is None:
            return
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = None
        refresh_ray_auth()
