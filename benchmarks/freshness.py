"""Freshness: the time from an event's publish on a NATS JetStream stream to the training step that trains it, while
the job replays Parquet history, and whether the stream ever starved.

One job, through the local services (planner, resource controller, master; `primus.tools.cluster`): the demo's
Parquet history (--days x --rows-per-hour) and --waves NATS stream sources (one JetStream stream each, this hour's
slot, priority over the history). The trainer is a plain user loop (freshness_support/loop.py, training.script) that
logs each step's end time and the stream rows it trained. Once the loop trains history, the benchmark publishes each
wave's events (a burst of --events, each stamped with its publish time in two dense features) and seals the wave's
hour at once (the adapter's `_SUCCESS` message): a stream's hour is its slot, and a slot is only planned once sealed
or over, so the seal is what a producer after freshness sends. The waves are --gap seconds apart, all while the history
still replays. The planner looks for newly ready slots every --replan-seconds (PlannerSettings.replan_seconds).

Printed: a table per wave, then one JSON object with freshness_p50_s and freshness_p99_s (publish to the end of the
step that trained it), stream_starved (a published event never trained, or a step that trained none of a flowing
wave's rows) and the rest of freshness_support.figures.summarize. --out also writes that JSON to a file (peers.py
reads it with --freshness-json). Needs NATS with JetStream at --nats (127.0.0.1:4222); without it the figures are
null and "error" says why.

Run from the repository root: PYTHONPATH=. python benchmarks/freshness.py [--quick].
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import yaml
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repository's packages

from benchmarks.freshness_support.figures import Wave, parse_exports, parse_steps, summarize
from benchmarks.freshness_support.loop import MARK, STAMP, WAVE
from primus.runtime import rpc
from primus.runtime.settings import PlannerSettings, as_env
from primus.tools.cluster import start_cluster, stop_services
from primus.tools.console import console
from primus.tools.demo import DEMO_START, demo_job
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES, generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc

LOOP = Path(__file__).resolve().parent / "freshness_support" / "loop.py"
HOUR_MARGIN = timedelta(minutes=4)  # the run stays within one hour of the server's clock: a stream's slot is its hour
JOB_SECONDS = 600.0


def nats_unavailable(uri: str) -> str:
    host, _, port = uri.split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return ""
    except OSError as exc:
        return f"no NATS server at {uri}: {exc}"


def event(wave: int, index: int, published: float) -> dict[str, object]:
    """A demo-shaped row whose `position` marks its wave and `item_price` holds its publish time (loop.py reads them)."""
    row: dict[str, object] = {LABEL: index % 2, "event_time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")}
    row.update({name: (index * 7 + offset) % size for offset, (name, size) in enumerate(SPARSE_FEATURES.items())})
    row.update(dict.fromkeys(DENSE_FEATURES, 0.5))
    row.update({STAMP: round(published, 4), WAVE: MARK - wave})
    return row


async def _nats(uri: str, work: Any) -> Any:
    client = await nats.connect(uri)
    try:
        return await work(client)
    finally:
        await client.close()


def make_streams(uri: str, streams: list[str]) -> None:
    async def work(client: Any) -> None:
        for stream in streams:
            await client.jsm().add_stream(name=stream, subjects=[f"{stream}.>"])

    asyncio.run(_nats(uri, work))


def delete_streams(uri: str, streams: list[str]) -> None:
    async def work(client: Any) -> None:
        for stream in streams:
            await client.jsm().delete_stream(stream)

    asyncio.run(_nats(uri, work))


def publish_wave(uri: str, stream: str, wave: int, events: int, epoch: float, hour: datetime) -> float:
    """Publish the wave's events as fast as JetStream acknowledges them, each stamped just before its publish, then
    seal the hour; the seal's time since the epoch."""

    async def work(client: Any) -> float:
        js = client.jetstream()
        for index in range(events):
            await js.publish(f"{stream}.events", json.dumps(event(wave, index, time.time() - epoch)).encode())
        await js.publish(f"{stream}.events._SUCCESS.{hour:%Y%m%dT%H}", b"")
        return time.time() - epoch

    sealed: float = asyncio.run(_nats(uri, work))
    return sealed


def job_document(history: Path, days: int, streams: list[str], uri: str, hour: datetime, log: Path, epoch: float, batch_size: int, export_every: int) -> dict[str, Any]:
    document: dict[str, Any] = demo_job(str(history) + "/date={date}/hour={hour}", days + 1)
    spec = document["spec"]
    this_hour = {"start": f"{hour:%Y-%m-%dT%H:%M}", "end": f"{hour + timedelta(hours=1):%Y-%m-%dT%H:%M}"}
    buses = [
        {"name": f"bus{index}", "kind": "stream", "adapter": "nats", "uri": uri, "stream": stream, "subject": f"{stream}.events", "timeRange": this_hour, "priority": 10}
        for index, stream in enumerate(streams)
    ]
    spec["data"]["sources"] = [*buses, {**spec["data"]["sources"][0], "name": "history"}]
    spec["data"].pop("eval", None)
    spec["resources"]["dataExecutor"]["replicas"] = 1
    spec["training"]["batchSize"] = batch_size
    spec["training"]["script"] = {"path": str(LOOP), "args": ["--out", str(log), "--epoch", repr(epoch), "--export-every", str(export_every)]}
    return document


def wait(condition: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {timeout:.0f} s")
        time.sleep(0.1)


def this_hour_with_margin() -> datetime:
    """The current hour once at least HOUR_MARGIN of it is left (waits for the next hour otherwise)."""
    now = datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    if hour + timedelta(hours=1) - now < HOUR_MARGIN:
        print(f"waiting for the hour to turn ({hour + timedelta(hours=1):%H:%M} UTC): a stream's slot is its hour", file=sys.stderr)
        time.sleep((hour + timedelta(hours=1) - now).total_seconds() + 1)
        return this_hour_with_margin()
    return hour


def run(args: argparse.Namespace) -> dict[str, Any]:
    reason = nats_unavailable(args.nats)
    if reason:
        return {"freshness_p50_s": None, "freshness_p99_s": None, "stream_starved": None, "error": reason}
    work = Path(tempfile.mkdtemp(prefix="primus-freshness-"))
    history = args.cache / f"history-{args.days}d-{args.rows_per_hour}"
    if not (history / "clicks").exists():
        print(f"generating {args.days * 24 * args.rows_per_hour} history rows into {history} ...", file=sys.stderr)
        generate_dataset(history / "clicks", DEMO_START, args.days, rows_per_hour=args.rows_per_hour, seed=5)
    streams = [f"PRIMUS_FRESH_{uuid.uuid4().hex[:10].upper()}" for _ in range(args.waves)]
    make_streams(args.nats, streams)
    hour = this_hour_with_margin()
    epoch, log = time.time(), work / "steps.jsonl"
    document = job_document(history / "clicks", args.days, streams, args.nats, hour, log, epoch, args.batch_size, args.export_every)
    cluster = start_cluster(work / "runs", work / "state", env=as_env(PlannerSettings(replan_seconds=args.replan_seconds)))
    waves: list[Wave] = []
    try:
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
        wait(lambda: log.exists() and len(log.read_text().splitlines()) >= args.warm_steps, "history steps", 300)
        for index, stream in enumerate(streams):
            if index:
                time.sleep(args.gap)  # the waves' spacing, while the history replays
            sealed = publish_wave(args.nats, stream, index, args.events, epoch, hour)
            waves.append(Wave(args.events, sealed))
            print(f"wave {index}: {args.events} events published and sealed at {sealed:.2f} s", file=sys.stderr)
        finished = lambda: master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state >= common_pb2.JOB_STATE_SUCCEEDED  # noqa: E731
        wait(finished, "end of the job", JOB_SECONDS)
        state = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state
    finally:
        stop_services(cluster.services)
        delete_streams(args.nats, streams)
    lines = log.read_text().splitlines()
    result = summarize(parse_steps(lines), waves, args.replan_seconds, parse_exports(lines))
    result["export_every_steps"] = args.export_every
    result["job_state"] = common_pb2.JobState.Name(state)
    return result


def print_table(result: dict[str, Any]) -> None:
    table = Table(title=f"freshness: {result['events']} events in {len(result['waves'])} waves, replan every {result['replan_seconds']} s", title_justify="left")
    for column in ("wave", "events", "trained", "seal to first step s", "seal to last step s"):
        table.add_column(column, justify="right")
    for index, wave in enumerate(result["waves"]):
        table.add_row(str(index), str(wave["events"]), str(wave["trained"]), str(wave["seal_to_first_step_s"]), str(wave["seal_to_last_step_s"]))
    console.print(table)
    console.print(
        f"publish to step: p50 {result['freshness_p50_s']} s, p99 {result['freshness_p99_s']} s, max {result['freshness_max_s']} s; "
        f"to the first snapshot after it (every {result['export_every_steps']} steps): p50 {result['snapshot_p50_s']} s, p99 {result['snapshot_p99_s']} s; "
        f"stream starved: {result['stream_starved']} ({result['starved_steps']} steps); history still replaying: {result['history_replaying']}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small history, two waves")
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--days", type=int, default=None, help="days of Parquet history (16: it replays through the waves on a quick machine)")
    parser.add_argument("--rows-per-hour", type=int, default=None)
    parser.add_argument("--waves", type=int, default=None, help="stream sources, each published and sealed once")
    parser.add_argument("--events", type=int, default=200, help="events per wave")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between the waves")
    parser.add_argument("--replan-seconds", type=float, default=0.5, help="the planner's look for newly ready slots (product default 30)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--export-every", type=int, default=500, help="steps between the loop's model snapshots (training.export.everySteps' default)")
    parser.add_argument("--warm-steps", type=int, default=20, help="history steps trained before the first wave")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "primus-bench-freshness")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    args.days = args.days or (1 if args.quick else 16)
    args.rows_per_hour = args.rows_per_hour or (2_000 if args.quick else 10_000)
    args.waves = args.waves or (2 if args.quick else 5)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    if "error" not in result:
        print_table(result)
    else:
        print(f"freshness: {result['error']}", file=sys.stderr)
    if args.out is not None:
        args.out.write_text(json.dumps(result))
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
