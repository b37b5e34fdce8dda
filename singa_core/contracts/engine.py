"""The Engine interface: where workers and servers run and how Params move.

An engine receives a :class:`singa_core.running.job.PreparedJob` and runs it: it creates workers
with their nets, the parameter-server side
(:class:`singa_core.contracts.stub.ParamShard` per slice owner) and the stubs that connect
them, then drives :class:`singa_core.running.training.TrainingLoop` in every worker. Layers,
workers and updaters never see which engine runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from singa_core.contracts.errors import SingaError


@dataclass
class TrainResult:
    final_step: int
    checkpoint: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # last per phase
    interrupted: bool = False
    stop_signal: int | None = None  # the signal that stopped training early, if any


class Engine:
    """Contract for engine plugins.

    * ``priority``: when the user names no engine, the highest-priority engine whose
      :meth:`supports` accepts the job runs it;
    * ``supports(job) -> str | None``: None if the engine can run this JobProto (cluster
      topology), else the reason it cannot;
    * ``cls(prepared, reporter)``, then :meth:`configure` with the engine options the
      user gave (``--address``, ``--placement``, ``--max-restarts``, ``--engine-option
      KEY=VALUE``; an engine lists those it takes in ``option_names``), then
      :meth:`describe` (process layout, for --dry-run) and :meth:`train` / :meth:`test`;
    * ``unavailable() -> str | None``: None when the engine can run here, else what it
      needs (an optional dependency, e.g. the pip command): ``singa list-plugins`` shows it.
    """

    priority: int = 0
    option_names: tuple[str, ...] = ()

    @classmethod
    def supports(cls, job) -> str | None:
        return None

    @classmethod
    def unavailable(cls) -> str | None:
        return None

    @classmethod
    def cluster_jobs(cls, address: str | None, insecure: bool = False):
        """The jobs that run on a cluster this engine joins (``singa submit --engine NAME
        --address``, ``singa jobs|logs|stop --address``): a context manager with
        ``submit(conf, args, name=, workspace=, cwd=)``, ``find(id)``, ``info(id)``,
        ``list()``, ``log(id, offset)`` and ``stop(id, now)`` over job records (dicts);
        None (the default) when the engine has no cluster of its own."""
        return None

    @classmethod
    def trial_runner(cls, address: str | None, insecure: bool = False):
        """Where ``singa tune --engine NAME`` runs a study's trials: a context manager
        with ``slots()`` (trials that fit at once), ``where`` (words for the table's
        heading) and ``start(launch)`` (a ``singa_core.tuning.launch.TrialLaunch``) giving a
        handle with ``records()``, ``poll()``, ``stop()``, ``kill()`` and ``reason(code)``,
        as ``singa_core.tuning.launch.TrialProcess`` has; None (the default) when the engine
        has no cluster to run trials on."""
        return None

    @classmethod
    def default_address(cls) -> str | None:
        """The cluster the user named for this engine outside the command line (Ray:
        ``RAY_ADDRESS``), or None."""
        return None

    def __init__(self, prepared, reporter) -> None:
        self.prepared = prepared
        self.reporter = reporter
        self.options: dict[str, str] = {}

    def configure(self, options: dict[str, str]) -> None:
        """Take the user's engine options (name -> text); unknown names are an error."""
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            name = self.type_names[0] if getattr(self, "type_names", ()) else type(self).__name__
            takes = ", ".join(self.option_names) or "none"
            raise SingaError(
                f"engine '{name}' has no option {', '.join(unknown)}",
                where="--" + unknown[0].replace("_", "-"),
                help=f"the options engine '{name}' takes: {takes}",
            )
        self.options = dict(options)

    def describe(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def train(self) -> TrainResult:  # pragma: no cover
        raise NotImplementedError

    def test(self, steps: int) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError
