"""JobReport and TrainingResult: report.json as today's master writes it loads and writes back equal, key for key and in
order; the master's builder writes that form; an older report with fewer keys loads with its defaults."""

from __future__ import annotations

import json
from typing import Any

from primus.job_state import JobState
from primus.records.counters import CARRIED, COUNTERS, NAMES
from primus.records.job_report import ExecutorRow, JobReport, ServiceRow
from primus.records.training_result import TrainingResult
from primus.spec.backend_kinds import BackendKind, backend_to_proto
from primus.v1 import common_pb2, master_pb2, planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master.report import build_report
from services.master.status import JobStatus, Restarts
from services.master.store import JobRecord

METRICS = {"rows": 400, "positives": 80, "auc": 0.71, "logloss": 0.45, "normalized_entropy": 0.9, "calibration": 1.02}
TRAINER: dict[str, Any] = {  # as services/master/servicer.py ReportTrainingResult keeps it
    "trainer_id": "j1-trainer-0",
    "steps": 120,
    "train_samples": 3800,
    "eval_samples": 400,
    "auc": 0.71,
    "logloss": 0.45,
    "final_loss": 0.44,
    "train_seconds": 12.5,
    "checkpoint": "/runs/j1/checkpoints/step-120",
    "eval": METRICS,
    "eval_recent": None,
    "progressive": METRICS,
    "sources": [
        {
            "source": "clicks",
            "rows_trained": 3800,
            "target_share": 1.0,
            "short_seconds": 0.25,
            "catch_up_minibatches": 2,
            "mean_loss": 0.46,
            "progressive": METRICS,
            "eval": None,
            "mixed_share": None,
        }
    ],
    "joined_label_fraction": 1.0,
    "snapshot": "",
    "minibatches": 120,
    "mixed_minibatches": 0,
    "metrics": {"custom": 1.5},
    "digests": {"clicks": {"eval": "400:11:7", "train": "3800:99:5"}},
    "ranks": [
        {"rank": 0, "samples": 1900, "steps": 60, "wait_seconds": 0.5, "step_seconds": 6.0},
        {"rank": 1, "samples": 1900, "steps": 60, "wait_seconds": 0.25, "step_seconds": 6.5, "left": True},
    ],
    "resizes": [{"generation": 1, "from": 2, "to": 1, "reason": "rank 1 lost", "gap_seconds": 1.5}],
}
LEDGER = {"source": "clicks", **{c.name: (2.5 if c.real else i + 1) for i, c in enumerate(COUNTERS)}, "pending_rows": 7}
RESIZE = {
    "unix_time": 1700000050.5,
    "role": "data_executor",
    "action": "RESIZE",
    "reason": "memory pressure",
    "automatic": True,
    "replicas_before": 2,
    "replicas_after": 2,
    "executor_id": "j1-data-executor-0",
    "resources_before": {"cpu": 1.0, "memory_mib": 1024},
    "resources_after": {"cpu": 2.0, "memory_mib": 2048},
    "throughput_before": 1000.5,
    "throughput_after": None,
    "signals": {"rss_fraction": 0.95},
}
SCALE_OUT = {**RESIZE, "action": "SCALE_OUT", "executor_id": "", "replicas_after": 3, "throughput_after": 1500.25, "signals": {}}
REPORT: dict[str, Any] = {  # report.json as services/master/report.py build_report writes it
    "job_id": "j1",
    "name": "ctr",
    "state": "SUCCEEDED",
    "message": "trained 120 steps",
    "created_unix": 1700000000.0,
    "finished_unix": 1700000100.25,
    "duration_seconds": 100.25,
    "services": [
        {"name": "master", "pid": 11, "address": "127.0.0.1:50051", "role": "master", "metrics_address": "127.0.0.1:9100"},
        {
            "name": "j1-data-executor-0",
            "pid": 12,
            "address": "127.0.0.1:50061",
            "role": "data_executor",
            "data_address": "127.0.0.1:50062",
            "host_id": "host-a",
            "exit_code": 0,
            "exit_reason": "RELEASED",
            "message": "",
            "slot": 0,
            "cpu": 2.0,
            "memory_mib": 2048,
            "limits": "CGROUP_V2",
            "backend": "local",
            "log": "/runs/j1/logs/j1-data-executor-0.log",
        },
    ],
    "plan": {
        "fingerprint": "abc123",
        "plan_version": 1,
        "task_count": 4,
        "planning_seconds": 0.0123,
        "sources": [
            {
                "source": "clicks",
                "partitions": 2,
                "partitions_waiting": 0,
                "tasks": 4,
                "bytes": 4096,
                "rows": 4200,
                "schema_versions": [1],
                "purpose": "TASK_PURPOSE_TRAIN",
            },
        ],
    },
    "sources": [LEDGER],
    "quarantined": [{"task_id": "t9", "source": "clicks", "partition": "dt=1", "reason": "bad file", "attempts": 3}],
    "trainer": TRAINER,
    "restarts": {"trainer": 1, "planner": 2},
    "ranks_lost": 1,
    "scaling": [SCALE_OUT, RESIZE],
    "resizes": [RESIZE],
    "traces_dir": "/runs/j1/traces",
}


def test_todays_report_loads_and_writes_back_equal_key_for_key() -> None:
    report = JobReport.from_json(json.loads(json.dumps(REPORT)))
    assert json.dumps(report.to_json()) == json.dumps(REPORT), "the same keys, values and order"
    assert report.state is JobState.SUCCEEDED and report.restarts["planner"] == 2
    assert isinstance(report.services[0], ServiceRow) and isinstance(report.services[1], ExecutorRow)
    assert report.services[1].exit_reason == "RELEASED" and report.resizes == (report.scaling[1],)
    assert report.sources[0].counts.bytes_read == LEDGER["bytes_read"] and report.sources[0].to_proto().pending_rows == 7
    assert report.trainer is not None and report.trainer.ranks[1].left and report.trainer.resizes[0].world_to == 1


def test_the_master_builds_that_report_from_its_peers_answers() -> None:
    job = JobRecord(
        job_id="j1",
        name="ctr",
        state=JobState.SUCCEEDED,
        spec_yaml="",
        run_dir="/runs/j1",
        created=1700000000.0,
        updated=1700000100.25,
        message="trained 120 steps",
        status=JobStatus(restarts=Restarts({"trainer": 1, "planner": 2}), ranks_lost=1, earlier_ledgers={"clicks": dict.fromkeys(CARRIED, 0)}),
        result=TrainingResult.from_json(TRAINER),
    )
    services = [common_pb2.ServiceInfo(name="master", pid=11, address="127.0.0.1:50051", metrics_address="127.0.0.1:9100")]
    executor = rc_pb2.Executor(
        executor_id="j1-data-executor-0",
        role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR,
        pid=12,
        address="127.0.0.1:50061",
        data_address="127.0.0.1:50062",
        host_id="host-a",
        exit_reason=rc_pb2.EXIT_REASON_RELEASED,
        resources=rc_pb2.ExecutorResources(cpu=2.0, memory_mib=2048),
        limits=rc_pb2.LIMIT_MECHANISM_CGROUP_V2,
        backend_kind=backend_to_proto(BackendKind.LOCAL),
        log_path="/runs/j1/logs/j1-data-executor-0.log",
    )
    summary = planner_pb2.PlanSummary(
        fingerprint="abc123",
        plan_version=1,
        task_count=4,
        planning_seconds=0.01234,
        sources=[planner_pb2.SourcePlan(source="clicks", partitions=2, tasks=4, bytes=4096, rows=4200, schema_versions=[1], purpose=common_pb2.TASK_PURPOSE_TRAIN)],
    )
    plan = planner_pb2.GetPlanResponse(
        summary=summary,
        sources=[common_pb2.SourceStats(**{k: v for k, v in LEDGER.items()})],
        quarantined=[planner_pb2.QuarantinedTask(task_id="t9", source="clicks", partition="dt=1", reason="bad file", attempts=3)],
    )

    def decision(row: dict[str, Any], action: int) -> rc_pb2.ScalingDecision:
        return rc_pb2.ScalingDecision(
            unix_time=row["unix_time"],
            role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR,
            action=action,  # type: ignore[arg-type]
            reason=row["reason"],
            automatic=row["automatic"],
            replicas_before=row["replicas_before"],
            replicas_after=row["replicas_after"],
            executor_id=row["executor_id"],
            resources_before=rc_pb2.ExecutorResources(**row["resources_before"]),
            resources_after=rc_pb2.ExecutorResources(**row["resources_after"]),
            throughput_before=row["throughput_before"],
            throughput_after=row["throughput_after"] or 0.0,
            measured=row["throughput_after"] is not None,
            signals=row["signals"],
        )

    decisions = [decision(SCALE_OUT, rc_pb2.SCALING_ACTION_SCALE_OUT), decision(RESIZE, rc_pb2.SCALING_ACTION_RESIZE)]
    built = build_report(job, services, [executor], plan, decisions).to_json()
    assert json.dumps(built) == json.dumps(REPORT)


def test_a_lost_ledgers_carried_counters_are_added_to_the_report() -> None:
    earlier = dict.fromkeys(CARRIED, 10)
    job = JobRecord("j1", "ctr", JobState.FAILED, "", "/runs/j1", 1.0, 2.0, status=JobStatus(earlier_ledgers={"clicks": earlier}))
    plan = planner_pb2.GetPlanResponse(sources=[common_pb2.SourceStats(**{k: v for k, v in LEDGER.items()})])
    row = build_report(job, [], [], plan).to_json()["sources"][0]
    assert all(row[name] == LEDGER[name] + 10 for name in CARRIED) and all(row[n] == LEDGER[n] for n in NAMES if n not in CARRIED)


def test_an_older_report_with_fewer_keys_loads_with_defaults() -> None:
    old = {
        "job_id": "j0",
        "name": "ctr",
        "state": "FAILED",
        "message": "trainer failed: boom",
        "created_unix": 1.0,
        "finished_unix": 3.0,
        "duration_seconds": 2.0,
        "services": [{"name": "planner", "pid": 3, "address": "127.0.0.1:1", "role": "planner"}],
        "plan": None,
        "sources": [{"source": "clicks", "samples": 5, "bytes_read": 100, "cpu_seconds": 0.5}],
        "quarantined": [],
        "trainer": {"trainer_id": "j0-trainer-0", "error": "boom"},
        "restarts": {},
    }
    report = JobReport.from_json(old)
    assert report.state is JobState.FAILED and report.ranks_lost == 0 and report.scaling == () and report.plan is None
    assert report.services == (ServiceRow("planner", 3, "127.0.0.1:1", "planner", ""),)
    counts = report.sources[0].counts
    assert (counts.samples, counts.bytes_read, counts.cpu_seconds, counts.labels_joined) == (5, 100, 0.5, 0)
    assert report.trainer == TrainingResult(trainer_id="j0-trainer-0", error="boom")
    assert report.to_json()["trainer"] == old["trainer"], "a failed trainer's result keeps its two keys"
    assert JobReport.from_json({**old, "state": "SOMETHING_NEWER"}).state is JobState.UNKNOWN


def test_a_training_result_round_trips_and_an_empty_one_is_none() -> None:
    result = TrainingResult.from_json(TRAINER)
    assert result is not None and result.to_json() == TRAINER
    assert TrainingResult.from_json({}) is None and JobReport.from_json({**REPORT, "trainer": {}}).to_json()["trainer"] == {}


def test_the_master_keeps_the_trainers_request_as_that_result() -> None:
    metrics = master_pb2.EvalMetrics(**METRICS)
    request = master_pb2.ReportTrainingResultRequest(
        trainer_id="j1-trainer-0",
        steps=120,
        train_samples=3800,
        eval_samples=400,
        auc=0.71,
        logloss=0.45,
        final_loss=0.44,
        train_seconds=12.5,
        checkpoint_path="/runs/j1/checkpoints/step-120",
        eval=metrics,
        progressive=metrics,
        sources=[
            master_pb2.SourceTrainingResult(
                source="clicks",
                rows_trained=3800,
                target_share=1.0,
                short_seconds=0.25,
                catch_up_minibatches=2,
                mean_loss=0.46,
                progressive=metrics,
                mixed_share=float("nan"),
            )
        ],
        joined_label_fraction=1.0,
        minibatches=120,
        metrics={"custom": 1.5},
        ranks=[
            master_pb2.RankResult(rank=0, samples=1900, steps=60, wait_seconds=0.5, step_seconds=6.0),
            master_pb2.RankResult(rank=1, samples=1900, steps=60, wait_seconds=0.25, step_seconds=6.5, left=True),
        ],
        resizes=[master_pb2.GangResize(generation=1, world_from=2, world_to=1, reason="rank 1 lost", gap_seconds=1.5)],
    )
    assert TrainingResult.of_proto(request, TRAINER["digests"]).to_json() == TRAINER
    failed = master_pb2.ReportTrainingResultRequest(trainer_id="j1-trainer-0", error="boom", steps=3)
    assert TrainingResult.of_proto(failed, {}).to_json() == {"trainer_id": "j1-trainer-0", "error": "boom"}
