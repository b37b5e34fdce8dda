"""The Engine interface: where workers and servers run and how Params move.

An engine receives a :class:`singa_core.job.PreparedJob` and runs it: it creates workers
with their nets, the parameter-server side (:class:`singa_core.stub.ParamShard` per slice
owner) and the stubs that connect them, then drives :class:`singa_core.training.TrainingLoop`
in every worker. Layers, workers and updaters never see which engine runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    * ``cls(prepared, reporter)``, then :meth:`describe` (process layout, for --dry-run)
      and :meth:`train` / :meth:`test`.
    """

    priority: int = 0

    @classmethod
    def supports(cls, job) -> str | None:
        return None

    def __init__(self, prepared, reporter) -> None:
        self.prepared = prepared
        self.reporter = reporter

    def describe(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def train(self) -> TrainResult:  # pragma: no cover
        raise NotImplementedError

    def test(self, steps: int) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError
