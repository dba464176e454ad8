"""The trainer role running a user's own training loop (training.script): the script reads its data through primus.data."""

from __future__ import annotations

import logging
import os
import runpy
import sys
import time
from pathlib import Path

from primus.data.client import DataClient
from primus.data.context import HOOKS, DataContext, ProgressFn
from primus.datapath.row_identity import Purpose, RowDigests
from primus.errors import PrimusError
from primus.runtime.worker import WorkerArgs
from primus.spec import TrainingJob
from primus.v1 import master_pb2
from services.trainer.training import TrainingResult, finite

log = logging.getLogger(__name__)
SIGTERM_EXIT = 143  # the trainer's SIGTERM handler ends a script with this (a cancel): it is no failure of the script


class ScriptError(PrimusError):
    """The user's script ended with a non-zero exit code."""


def run_script(args: WorkerArgs, job: TrainingJob, progress: ProgressFn) -> tuple[TrainingResult, master_pb2.ReportTrainingResultRequest]:
    """Run the script as __main__ with the job's data context in its environment; the result is what its clients read."""
    script = job.spec.training.script
    assert script is not None
    context = DataContext(args.job_id, args.executor_id, args.master, args.planner, args.resource_controller, args.run_dir)
    context.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(context.to_env())
    HOOKS.progress, HOOKS.clients = progress, []
    path = Path(script.path)
    os.chdir(script.working_dir or path.parent)
    sys.argv = [str(path), *script.args]
    sys.path.insert(0, str(path.parent))
    log.info("running %s %s in %s", path, " ".join(script.args), os.getcwd())
    started = time.perf_counter()
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            if exc.code == SIGTERM_EXIT:
                raise
            raise ScriptError(f"training.script: {path} exited with code {exc.code}") from None
    return _result(args, [c for c in HOOKS.clients if isinstance(c, DataClient)], time.perf_counter() - started)


def _result(args: WorkerArgs, clients: list[DataClient], seconds: float) -> tuple[TrainingResult, master_pb2.ReportTrainingResultRequest]:
    """Per source the rows the script's clients consumed, the batches they yielded, and the metrics it reported."""
    by_source: dict[str, int] = {}
    metrics: dict[str, float] = {}
    steps = eval_rows = 0
    digests = RowDigests()
    for client in clients:
        digests.merge(client.digests)
        for source, rows in client.consumed().items():
            by_source[source] = by_source.get(source, 0) + rows
        metrics.update(client.metrics)
        steps, eval_rows = steps + client.steps, eval_rows + client.eval_rows
    result = TrainingResult(steps=steps, train_samples=sum(by_source.values()), eval_samples=eval_rows, train_seconds=seconds, samples_by_source=by_source)
    result.digests = digests
    result.auc, result.logloss = metrics.get("auc", float("nan")), metrics.get("logloss", float("nan"))
    result.final_loss = metrics.get("loss", float("nan"))
    request = master_pb2.ReportTrainingResultRequest(
        job_id=args.job_id,
        trainer_id=args.executor_id,
        steps=steps,
        train_samples=result.train_samples,
        eval_samples=eval_rows,
        auc=finite(result.auc),
        logloss=finite(result.logloss),
        train_seconds=seconds,
        final_loss=finite(result.final_loss),
        checkpoint_path=str(args.run_dir / "checkpoints"),
        sources=[master_pb2.SourceTrainingResult(source=name, rows_trained=rows) for name, rows in sorted(by_source.items())],
        metrics={name: finite(value) for name, value in metrics.items()},
        row_digests=digest_messages(digests),
    )
    return result, request


def digest_messages(digests: RowDigests) -> list[master_pb2.RowDigest]:
    """The digests for the master's report, per source and purpose."""
    return [
        master_pb2.RowDigest(source=source, purpose=purpose.value, rows=d.count, sum=d.total, xor=d.xor)
        for purpose in Purpose
        for source, d in digests.by_purpose(purpose).items()
    ]
