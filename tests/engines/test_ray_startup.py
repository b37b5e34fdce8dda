"""What a start-up deadline names (plugins/engines/ray/startup.py): only the late
processes, each with what it waited for (from the GCS actor table and a connection to its
worker), and a firewall only for a worker process on another node that does not answer.
The deadline on a real cluster: ray_cluster_checks.py::test_start_up_has_a_deadline (both
nodes reachable: no firewall) and test_ray_machines.py check e (a firewalled machine)."""

from __future__ import annotations

from singa_builtins.engines.ray.startup import Late, deadline_error, waiting_for


def _row(state, port=0, pid=0, ip="10.77.0.2"):
    return {"State": state, "Address": {"IPAddress": ip, "Port": port}, "Pid": pid}


def _never(ip, port):
    raise AssertionError("no worker to probe")


def test_what_each_late_process_waits_for_comes_from_its_actor_and_its_worker():
    probed = []

    def probe(ip, port):
        probed.append((ip, port))
        return port == 10005

    assert waiting_for(None, "s", _never) == ("its actor is not known to Ray yet", False)
    assert waiting_for(_row("PENDING_CREATION"), "s", _never) == (
        "Ray has not started a worker process for it yet", False)  # fmt: skip
    assert waiting_for(_row("DEPENDENCIES_UNREADY"), "s", _never)[1] is False
    assert waiting_for(_row("PENDING_CREATION", 10005), "s", probe) == (
        "its worker process at 10.77.0.2:10005 is creating the actor", False)  # fmt: skip
    cut_off = "its worker process at 10.77.0.2:10006 does not answer from this machine"
    assert waiting_for(_row("PENDING_CREATION", 10006), "s", probe) == (cut_off, True)
    text, cut = waiting_for(_row("ALIVE", 10005, 4321), "sharing memory", probe)
    assert (text, cut) == ("its actor (pid 4321) is up and had not finished sharing memory", False)
    assert waiting_for(_row("ALIVE", 10006, 4321), "s", probe)[1] is True
    assert probed == [("10.77.0.2", 10005), ("10.77.0.2", 10006), ("10.77.0.2", 10005),
                      ("10.77.0.2", 10006)]  # fmt: skip


HEAD = "10.77.0.1 (Ray node aaaaaaaaaaaa)"
OTHER = "10.77.0.2 (Ray node bbbbbbbbbbbb)"


def test_a_firewall_is_named_only_for_an_unreachable_worker_on_another_node():
    late = [
        Late("worker process 2 (group 1)", OTHER, False, "its worker ... does not answer", True),
        Late("worker process 3 (group 1)", OTHER, False, "Ray has not started ...", False),
    ]
    err = deadline_error(20, "starting the actors", late, load=0.5)
    text = err.format()
    first = text.splitlines()[0]
    assert "within the start-up deadline (20 s, starting the actors)" in first
    assert "worker process 2 (group 1) on node " + OTHER + ": its worker" in first
    assert "worker process 3 (group 1) on node " + OTHER in first
    assert "10.77.0.1" not in text  # the head answered: not named
    assert "firewall" in text
    assert "cannot reach the worker processes Ray runs on " + OTHER in text
    assert err.where == "--startup-timeout" and "help:" in text


def test_slow_processes_are_not_blamed_on_a_firewall():
    # every process late, the driver's own node included: a loaded machine, not a firewall;
    # an unreachable worker on the driver's own node is not a firewall either
    late = [
        Late("server process 0", HEAD, True, "Ray has not started a worker process", False),
        Late("worker process 1", HEAD, True, "its worker at 10.77.0.1:10010 does not answer", True),
        Late("worker process 2", OTHER, False, "its worker process is creating the actor", False),
    ]
    text = deadline_error(60, "starting the actors", late, load=40.2).format()
    assert "firewall" not in text
    assert "slow to start (this machine's load: 40.2 on" in text and "--startup-timeout" in text
    assert text.count(" on node ") == 3


def _node(port=6380, ip="10.77.0.2"):
    return {"NodeManagerAddress": ip, "NodeManagerPort": port}


def test_a_nodes_late_check_is_cut_off_only_on_another_node_that_does_not_answer():
    from singa_builtins.engines.ray.startup import check_waiting_for

    text, cut = check_waiting_for(_node(), True, False, _never)
    assert "this machine's own node" in text and not cut
    # the raylet refuses the connection: cut off
    text, cut = check_waiting_for(_node(), False, True, lambda ip, port: False)
    assert (text, cut) == ("its raylet at 10.77.0.2:6380 does not answer from this machine", True)
    # the raylet answers, this machine's own node answered: the worker ports (inferred)
    text, cut = check_waiting_for(_node(), False, True, lambda ip, port: True)
    assert cut and text.startswith("its raylet at 10.77.0.2:6380 answers, but the check task")
    # the raylet answers and this machine's own node was late too: slow, not cut off
    text, cut = check_waiting_for(_node(), False, False, lambda ip, port: True)
    assert not cut and "nor had this machine's" in text
    late = [Late("", HEAD, True, "own", False), Late("", OTHER, False, text, cut)]
    err = deadline_error(0.5, "the nodes' start-up check", late, load=3.0).format()
    assert "node " + HEAD + ": own; node " + OTHER + ": its raylet" in err
    assert "firewall" not in err
