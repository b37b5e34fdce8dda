"""Who may use a Ray cluster (plugins/engines/ray/auth.py): the classification of the GCS's
answers and its messages, the token this process would send, the options, and the private
runtime's own token — without a Ray runtime; then the real checks with token-protected and
open clusters (tests/engines/ray_auth_checks.py) inside a private network namespace."""

from __future__ import annotations

import os

import pytest
from singa_builtins.engines.ray.auth import (
    COPY_TOKEN,
    TOKEN_PLACES,
    Answer,
    Credentials,
    PrivateToken,
    classify,
    connect_problem,
    local_credentials,
    split_address,
)

from singa_core.errors import SingaError
from tests.conftest import mlp_conf, needs, run_singa, write_csv_blobs
from tests.engines.test_ray_engine import run_checks_in_private_network

ADDR = "10.0.0.1:6379"
TOKEN = "t" * 64


class FakeGcs:
    """A GCS that checks tokens (``token``: the one it takes) or not (``token=None``)."""

    def __init__(self, token: str | None, down: bool = False) -> None:
        self.token, self.down = token, down
        self.asked: list[str | None] = []

    def __call__(self, creds: Credentials | None) -> Answer:
        sent = creds.token if creds is not None else None
        self.asked.append(sent)
        if self.down:
            return Answer("unreachable", "UNAVAILABLE: failed to connect")
        if self.token is None or sent == self.token:
            return Answer("ok")
        return Answer("unauthenticated", "InvalidAuthToken")


def creds(mode: str | None, token: str | None, source: str = "RAY_AUTH_TOKEN") -> Credentials:
    return Credentials(mode, mode == "token", token, source)


def error_of(*args) -> str:
    with pytest.raises(SingaError) as err:
        classify(*args)
    text = err.value.format()
    assert text.startswith("--address: error: ") and "\nhelp: " in text, text
    return text


# -- the classification ------------------------------------------------------------------------
def test_a_cluster_that_takes_our_token_is_joined_without_a_word():
    gcs = FakeGcs(TOKEN)
    assert classify(ADDR, creds("token", TOKEN), gcs, False) is None
    assert gcs.asked == [None, TOKEN]  # first without a token: does it check at all?


def test_without_ray_auth_mode_the_error_names_it():
    text = error_of(ADDR, creds(None, TOKEN, "/home/u/.ray/auth_token"), FakeGcs(TOKEN), False)
    assert "requires token authentication" in text
    assert "RAY_AUTH_MODE=token is not exported" in text
    assert "a token is in /home/u/.ray/auth_token, but Ray sends it only with" in text
    assert text.endswith("help: export RAY_AUTH_MODE=token")
    text = error_of(ADDR, creds("disabled", None, "nothing here"), FakeGcs(TOKEN), False)
    assert "RAY_AUTH_MODE is 'disabled', not 'token'" in text and "no token was found" in text
    assert f"help: export RAY_AUTH_MODE=token, and {COPY_TOKEN}" in text


def test_token_mode_without_a_token_names_the_places():
    why = "RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are not set and /h/.ray/auth_token does not exist"
    text = error_of(ADDR, creds("token", None, why), FakeGcs(TOKEN), False)
    assert f"this process has no token ({TOKEN_PLACES}): {why}" in text
    assert f"help: {COPY_TOKEN}" in text


def test_a_refused_token_says_so():
    gcs = FakeGcs(TOKEN)
    text = error_of(ADDR, creds("token", "x" * 64, "RAY_AUTH_TOKEN_PATH (/t)"), gcs, False)
    assert "the cluster refused this machine's token (from RAY_AUTH_TOKEN_PATH (/t))" in text
    assert "copy the head's ~/.ray/auth_token" in text
    assert gcs.asked == [None, "x" * 64]


@pytest.mark.parametrize("mode", [None, "token"])
def test_a_cluster_without_token_checks_needs_insecure(mode):
    text = error_of(ADDR, creds(mode, TOKEN), FakeGcs(None), False)
    assert f"the Ray cluster at {ADDR} does not check tokens" in text
    help_line = text.splitlines()[-1]
    for step in ("export RAY_AUTH_MODE=token", "`ray get-auth-token --generate`",
                 "copy its ~/.ray/auth_token", "restart the nodes", "--insecure"):  # fmt: skip
        assert step in help_line, step
    warning = classify(ADDR, creds(mode, TOKEN), FakeGcs(None), True)
    assert warning.startswith("warning: ") and "\n" not in warning
    assert "anyone who reaches its ports can run code on its nodes" in warning


def test_insecure_does_not_excuse_a_missing_token():
    text = error_of(ADDR, creds("token", None, "none"), FakeGcs(TOKEN), True)
    assert "has no token" in text


def test_nothing_answering_and_something_else_answering():
    text = error_of(ADDR, creds("token", TOKEN), FakeGcs(TOKEN, down=True), False)
    assert f"nothing answers at {ADDR}" in text
    assert "firewall" in text and "`ray start --head`" in text

    def raylet(c):
        return Answer("other", "UNIMPLEMENTED: Method not found")

    text = error_of(ADDR, creds("token", TOKEN), raylet, False)
    assert "not as a Ray cluster's GCS (UNIMPLEMENTED" in text and "6379" in text


def test_a_port_where_nothing_listens_is_seen_at_once():
    """No listener is started: a port of this machine that is not open (found by binding
    it and closing it again) refuses the connection."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    problem = connect_problem(f"127.0.0.1:{port}", timeout=2)
    assert problem is not None and "refused" in problem.lower()


@pytest.mark.parametrize("bad", ["head", "head:", ":6379", "head:port", "head:70000"])
def test_an_address_that_is_not_host_port(bad):
    with pytest.raises(SingaError) as err:
        split_address(bad)
    assert "is not HOST:PORT" in str(err.value) and "help:" in str(err.value)
    assert split_address("[::1]:6379") == ("::1", 6379)


@needs("ray")
def test_auto_is_resolved_as_ray_resolves_it_before_the_check(monkeypatch):
    from ray._private import services
    from singa_builtins.engines.ray import auth

    seen = []
    monkeypatch.setattr(services, "canonicalize_bootstrap_address", lambda a: "10.0.0.5:6379")
    monkeypatch.setattr(auth, "connect_problem", lambda gcs: seen.append(gcs) or "refused")
    with pytest.raises(SingaError) as err:
        auth.check_cluster("auto", insecure=False)
    assert seen == ["10.0.0.5:6379"]
    assert "nothing answers at auto (10.0.0.5:6379)" in str(err.value)

    def nothing_here(address):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", nothing_here)
    with pytest.raises(SingaError) as err:
        auth.check_cluster("auto", insecure=False)
    assert "--address auto: no Ray cluster was found on this machine" in str(err.value)
    assert "help: pass the head's address" in str(err.value)


@needs("ray")
def test_a_gcs_that_takes_connections_but_answers_late_is_slow_not_gone(monkeypatch):
    """Under load the GCS's answer may not come in time: asked twice, and while it still
    takes TCP connections it is said to be slow, never "nothing answers" (which would list
    this machine's jobs there as on a cluster that does not answer)."""
    from singa_builtins.engines.ray import auth

    asked = []
    monkeypatch.setattr(auth, "ask_gcs", lambda gcs, creds: asked.append(gcs)
                        or auth.Answer("unreachable", "DEADLINE_EXCEEDED"))  # fmt: skip
    monkeypatch.setattr(auth, "connect_problem", lambda gcs: None)
    with pytest.raises(SingaError) as err:
        auth._ask_answering("10.0.0.5:6379", "10.0.0.5:6379", None)
    assert len(asked) == 2 and not getattr(err.value, "unreachable", False)
    assert "takes connections but did not answer a call within" in str(err.value)
    monkeypatch.setattr(auth, "connect_problem", lambda gcs: "refused")  # gone meanwhile
    assert auth._ask_answering("10.0.0.5:6379", "10.0.0.5:6379", None).kind == "unreachable"


def test_the_waits_are_scaled_by_this_machines_start_up(monkeypatch):
    from singa_builtins.engines.ray import machine

    for age, cpu, expected in ((0.6, 0.4, 1.0), (6.0, 0.4, 10.0), (3.0, 0.5, 4.0)):
        monkeypatch.setattr(machine, "_measured", None)
        monkeypatch.setattr(machine, "process_age", lambda age=age: age)
        monkeypatch.setattr(machine.os, "times", lambda cpu=cpu: os.times_result(
            (cpu, 0.0, 0.0, 0.0, 0.0)))  # fmt: skip
        assert machine.slowdown() == pytest.approx(expected)
    assert machine.scaled(6.0, cap=9.0) == 9.0 and machine.scaled(3.0) == 12.0
    monkeypatch.setattr(machine, "_measured", None)
    assert 1.0 <= machine.slowdown() <= machine.CAP  # this process, measured for real


# -- this process's token -----------------------------------------------------------------------
def test_the_token_is_looked_up_in_rays_order(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("from-home\n")
    path = tmp_path / "tok"
    path.write_text("  from-path \n")

    def look(address=ADDR, **env):
        return local_credentials(address, env, home)

    assert look(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="from-env", RAY_AUTH_TOKEN_PATH=str(path)) \
        == Credentials("token", True, "from-env", "RAY_AUTH_TOKEN")  # fmt: skip
    c = look(RAY_AUTH_MODE="TOKEN", RAY_AUTH_TOKEN=" ", RAY_AUTH_TOKEN_PATH=str(path))
    assert (c.mode, c.sends_token, c.token, c.source) == (
        "token", True, "from-path", f"RAY_AUTH_TOKEN_PATH ({path})",
    )  # fmt: skip
    c = look()
    assert (c.mode, c.sends_token, c.token) == (None, False, "from-home")
    assert look("auto").sends_token  # Ray turns token mode on for "auto" when a token exists
    assert not look(RAY_AUTH_MODE="disabled").sends_token
    c = look(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(tmp_path / "nope"))
    assert c.token is None and "cannot be read" in c.source  # Ray does not fall back either
    c = local_credentials(ADDR, {"RAY_AUTH_MODE": "token"}, tmp_path / "empty")
    assert c.token is None and c.source == (
        "RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are not set and "
        f"{tmp_path / 'empty' / '.ray' / 'auth_token'} does not exist"
    )


def test_the_private_token_lives_in_the_environment_only(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/users/cluster/token")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    tokens = set()
    for _ in range(2):
        private = PrivateToken()
        private.install()
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert "RAY_AUTH_TOKEN_PATH" not in os.environ
        tokens.add(os.environ["RAY_AUTH_TOKEN"])
        assert len(os.environ["RAY_AUTH_TOKEN"]) == 64
        private.restore()
        assert os.environ["RAY_AUTH_MODE"] == "disabled"
        assert os.environ["RAY_AUTH_TOKEN_PATH"] == "/users/cluster/token"
        assert "RAY_AUTH_TOKEN" not in os.environ
    assert len(tokens) == 2 and list(tmp_path.iterdir()) == []


# -- the options ------------------------------------------------------------------------------
def _job(tmp_path):
    data = write_csv_blobs(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws"))
    return conf


@needs("ray")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--startup-timeout", "0"], "startup-timeout is '0'; it must be a number above 0"),
        (["--startup-timeout", "-3"], "startup-timeout is '-3'"),
        (["--startup-timeout", "soon"], "startup-timeout is 'soon'"),
        (["--startup-timeout", "inf"], "startup-timeout is 'inf'"),
        (["--engine-option", "insecure=maybe"], "insecure is 'maybe'; it must be true or false"),
    ],
)
def test_bad_values_of_the_new_options_are_located_errors(tmp_path, args, message):
    res = run_singa("train", str(_job(tmp_path)), "--dry-run", "--engine", "ray", *args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "help:" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    where = "--insecure" if "insecure" in message else "--startup-timeout"
    assert res.stderr.startswith(f"{where}: error: "), res.stderr


@needs("ray")
def test_the_options_reach_ray_options(tmp_path):
    from singa_builtins.engines.ray.runtime import Runtime

    from singa_core import Job

    def options(**given):
        job = Job.from_file(_job(tmp_path), engine="ray", engine_options=given)
        return job._engine(job.prepare(), job._reporter(None)).ray_options

    o = options()
    assert (o.insecure, o.startup_timeout, o.address) == (False, 60.0, None)
    o = options(address="h:6379", insecure=True, startup_timeout="2.5")
    assert (o.insecure, o.startup_timeout, o.address) == (True, 2.5, "h:6379")
    assert Runtime(o.address, insecure=o.insecure).insecure and not Runtime("h:6379").insecure
    o = options(insecure="true")  # no --address: RAY_ADDRESS may name the cluster
    assert o.insecure and o.address is None
    assert Runtime("local").private and Runtime("h:1", insecure=True).insecure


def test_insecure_is_an_option_of_cluster_engines_only(tmp_path):
    res = run_singa("train", str(_job(tmp_path)), "--dry-run", "--engine", "shm", "--insecure")
    assert res.returncode == 2 and "engine 'shm' has no option insecure" in res.stderr


# -- with real clusters ------------------------------------------------------------------------
@pytest.mark.slow  # Ray clusters in a private namespace: minutes, not seconds
def test_token_authentication_with_real_clusters_in_a_private_network_namespace():
    run_checks_in_private_network("tests/engines/ray_auth_checks.py", "-q -s")


def test_a_token_file_others_can_read_is_warned_about(tmp_path):
    from singa_builtins.engines.ray.auth import token_file_exposure

    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    token = home / ".ray" / "auth_token"
    token.write_text("t" * 32)
    env = {"RAY_AUTH_MODE": "token"}
    token.chmod(0o644)  # what `ray get-auth-token --generate` leaves
    warning = token_file_exposure(local_credentials("h:6379", env, home))
    assert f"the Ray token file {token} can be read by other users (mode 0644)" in warning
    assert f"chmod 600 {token}" in warning
    token.chmod(0o600)
    assert token_file_exposure(local_credentials("h:6379", env, home)) is None
    other = tmp_path / "copy"
    other.write_text("t" * 32)
    other.chmod(0o640)
    creds = local_credentials("h:6379", {**env, "RAY_AUTH_TOKEN_PATH": str(other)}, home)
    assert "mode 0640" in token_file_exposure(creds)
    creds = local_credentials("h:6379", {**env, "RAY_AUTH_TOKEN": "t" * 32}, home)
    assert token_file_exposure(creds) is None  # no file


@needs("ray")
def test_any_exception_from_ray_init_is_located_after_a_shutdown(monkeypatch):
    """Under load Ray's start raised a bare `Exception: The current node timed out during
    startup`: a traceback and a runtime left behind. Every class is now a located error,
    after ray.shutdown() and with the user's RAY_AUTH_* environment restored."""
    import ray
    from singa_builtins.engines.ray.runtime import Runtime

    calls = []
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}

    def failing_init(*args, **kwargs):
        raise Exception("The current node timed out during startup.")

    monkeypatch.setattr(ray, "init", failing_init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    with pytest.raises(SingaError) as info:
        with Runtime(None):
            pass
    assert "cannot start a private Ray runtime: Exception: The current node timed out" in str(
        info.value
    )
    assert info.value.where == "--engine ray" and calls == ["shutdown"]
    assert {k: os.environ.get(k) for k in before} == before
