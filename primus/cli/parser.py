"""The primus command's arguments: global flags and one subcommand per verb, each bound to its function in commands.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from primus.auth import security
from primus.cli.commands import (
    DEFAULT_RUNS_DIR,
    DEFAULT_STATE_DIR,
    LIFECYCLE_VERBS,
    cmd_config,
    cmd_convert,
    cmd_cost,
    cmd_delete,
    cmd_demo,
    cmd_describe,
    cmd_down,
    cmd_explore,
    cmd_get,
    cmd_lifecycle,
    cmd_logs,
    cmd_plan,
    cmd_report,
    cmd_restart,
    cmd_run,
    cmd_savepoint,
    cmd_scale,
    cmd_scaling,
    cmd_status,
    cmd_stop,
    cmd_submit,
    cmd_up,
    cmd_validate,
    master_client,
    runs_location,
)
from primus.explorer import DEFAULT_PORT as EXPLORE_PORT
from primus.runtime.backend_flags import add_backend_arguments
from primus.spec import spec_versions
from primus.spec.roles import Role
from primus.tools import access_cli, contexts, digest_cli
from primus.tools.cluster import (
    RESTARTABLE,
)
from primus.tools.job_output import OUTPUTS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="primus", description="Primus: unified training for recommendation models.")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="where `primus up` keeps its cluster state (default .primus)")
    parser.add_argument(
        "--runs-dir", type=runs_location, default=DEFAULT_RUNS_DIR, help="where job folders, reports and traces go: a folder (default runs) or s3://bucket/prefix"
    )
    parser.add_argument(
        "--master", default="", help=f"the master's host:port (default: {contexts.MASTER_ENV}, then the services `primus up` started here, then the current context)"
    )
    parser.add_argument("--token", default="", help=f"bearer token for the master (default: {security.TOKEN_ENV}, then the context's)")
    parser.add_argument("--ca", default="", help=f"PEM file of the CA that signed the master's certificate: TLS on (default: {security.CA_ENV}, then the context's)")
    parser.add_argument("--cert", default="", help=f"PEM client certificate, for mutual TLS (default: {security.CERT_ENV}, then the context's)")
    parser.add_argument("--key", default="", help=f"PEM key of --cert (default: {security.KEY_ENV}, then the context's)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(fn=fn)
        return command

    add("validate", cmd_validate, "check job specs without running anything").add_argument("job", type=Path, nargs="+", help="one or more job spec files")
    convert = add("convert", cmd_convert, "write a job spec in another version (primus/v1 <-> primus/v2), every field carried over")
    convert.add_argument("job", type=Path)
    convert.add_argument("--to", default=spec_versions.LATEST, choices=spec_versions.VERSIONS, help=f"the version to write (default {spec_versions.LATEST})")
    convert.add_argument("-o", "--output-file", type=Path, default=None, help="write it here (default: standard output); YAML comments are not carried over")
    plan = add("plan", cmd_plan, "print the task graph a job would get, without running anything")
    plan.add_argument("job", type=Path)
    plan.add_argument("--explain", action="store_true", help="one line per partition: included, waiting or skipped, and why")
    plan.add_argument("--replicas", type=int, default=0, help="spread partition discovery over this many extra planner processes")
    digest_cli.add_verbs(add)
    up = add("up", cmd_up, "start master, planner and resource_controller as local processes")
    add_backend_arguments(up, many=True)
    add_security_switches(up)
    up.add_argument("--queues", default=None, metavar="FILE", help="queues, cohorts and priority classes the master admits jobs through (docs/guides/queues.md)")
    access_cli.add_verbs(add, master_client)
    add("down", cmd_down, "stop the services `primus up` started")
    restart = add("restart", cmd_restart, "stop one service `primus up` started and start it again at its address; running jobs carry on")
    restart.add_argument(
        "service",
        choices=RESTARTABLE,
        help=(
            "planner: running jobs are planned again and resume from their last checkpoint; master: it drives them on; "
            "resource_controller: it re-adopts the executors that still run"
        ),
    )
    submit = add("submit", cmd_submit, "hand a job to the running master")
    submit.add_argument("job", type=Path)
    submit.add_argument("--watch", action="store_true", help="follow the job and print its report")
    submit.add_argument("--from-savepoint", default="", metavar="NAME", help="start from a savepoint's model (`primus savepoint JOB NAME`)")
    status = add("status", cmd_status, "list jobs, or show one, one line each")
    status.add_argument("job_id", nargs="?")
    status.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    savepoint = add("savepoint", cmd_savepoint, "keep a job's last committed checkpoint under a name; `submit --from-savepoint NAME` starts from it")
    savepoint.add_argument("job_id")
    savepoint.add_argument("name")
    savepoint.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    get = add("get", cmd_get, "list jobs (`get jobs`), show one (`get job ID`), or the queues with their quota and usage (`get queues`)")
    get.add_argument("kind", choices=("jobs", "job", "queues"))
    get.add_argument("job_id", nargs="?")
    get.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    describe = add("describe", cmd_describe, "show one job in full: state, progress, times, where its files are, what its spec asks for")
    describe.add_argument("kind", choices=("job",))
    describe.add_argument("job_id")
    describe.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    logs = add("logs", cmd_logs, "print the log lines of a job's executors and trainers, each after its executor id")
    logs.add_argument("job_id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job has ended")
    logs.add_argument("--executor", default="", help="only this executor's (or trainer's) log")
    logs.add_argument("--tail", type=int, default=0, help="start each log at its last this many lines")
    config = add("config", cmd_config, f"the master contexts in {contexts.config_path()} ({contexts.CONFIG_ENV} moves it)")
    config.add_argument("action", choices=("get-contexts", "current-context", "use-context", "set-context"))
    config.add_argument("name", nargs="?")
    config.add_argument("--master", dest="context_master", default="", help="set-context: the context's master host:port")
    scaling = add("scaling", cmd_scaling, "print a job's scaling decisions: signals, reason, action, samples/s before and after")
    scaling.add_argument("run", type=Path, help="a job id (asked of the running resource controller), a run folder or its report.json")
    scaling.add_argument("-o", "--output", choices=("table", "json"), default="table")
    for verb, (help_text, _) in LIFECYCLE_VERBS.items():
        add(verb, cmd_lifecycle, help_text).add_argument("job_id")
    delete = add("delete", cmd_delete, "forget a job that has ended; its run folder stays unless --purge")
    delete.add_argument("job_id")
    delete.add_argument("--purge", action="store_true", help="delete its run folder too: report, checkpoints, logs, traces")
    scale = add("scale", cmd_scale, "set how many data executors (or an elastic job's trainer ranks) a running job has: new ones join, removed ones drain or leave")
    scale.add_argument("job_id")
    scale.add_argument("--role", default=Role.DATA_EXECUTOR.value, choices=[r.value for r in Role], help="the role, as the spec names it (default dataExecutor)")
    scale.add_argument("--replicas", type=int, default=None)
    scale.add_argument("--min", type=int, default=None, help="the autoscale bounds' minimum (with --max; needs the role's autoscaling on)")
    scale.add_argument("--max", type=int, default=None, help="the autoscale bounds' maximum")
    scale.add_argument("--reason", default="", help="kept in the job's scaling log")
    stop = add("stop", cmd_stop, "end a job's training where it is (an open-ended job's end), then evaluate and write the report")
    stop.add_argument("job_id")
    stop.add_argument("--watch", action="store_true", help="follow the job to its end and print its report")
    run = add("run", cmd_run, "run a job end to end: start services if needed, submit, follow, report, tear down")
    run.add_argument("job", type=Path)
    add_backend_arguments(run, many=False)
    add_security_switches(run)
    demo = add("demo", cmd_demo, "generate a synthetic CTR dataset with drift and train on it")
    demo.add_argument("--data-dir", type=Path, default=Path("runs/demo-data"))
    demo.add_argument("--days", type=int, default=4, help="days of data; the last one is held out for evaluation")
    demo.add_argument("--rows-per-hour", type=int, default=600)
    demo.add_argument("--seed", type=int, default=7)
    add_backend_arguments(demo, many=False)
    add_security_switches(demo)
    report = add("report", cmd_report, "print a run's report")
    report.add_argument("run", help="a run folder (or s3://.../JOB_ID), its report.json, or a job id")
    report.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    cost = add("cost", cmd_cost, "per source: bytes read, CPU, retries, useful samples and waste, checked against the traces")
    cost.add_argument("run", help="a run folder (or s3://.../JOB_ID), its report.json, or a job id")
    cost.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    explore = add("explore", cmd_explore, "serve a page on this machine to explore runs: cost by source, service and task, task graph, trace waterfall")
    explore.add_argument("run", type=Path, nargs="*", help="only these runs: run folders, or job ids under --runs-dir (default: every run there)")
    explore.add_argument("--port", type=int, default=EXPLORE_PORT, help=f"port to listen on (default {EXPLORE_PORT}; 0: any free port)")
    explore.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    explore.add_argument("--runs-dir", type=runs_location, default=argparse.SUPPRESS, help="where the runs are (the global --runs-dir, given after the verb)")
    explore.add_argument(
        "--token-secret-file", default="", help=f"the secret Primus tokens are signed with (default: {security.SECRET_ENV}); set, every request needs a user token"
    )
    explore.add_argument("-v", "--verbose", action="store_true", help="log every request")
    return parser


def add_security_switches(command: argparse.ArgumentParser) -> None:
    """up, run and demo: the services they start serve TLS, mutual TLS, or require a token (a local CA and secret)."""
    command.add_argument("--tls", action="store_true", help="serve every gRPC service and the Flight data plane over TLS (a local CA under --state-dir)")
    command.add_argument("--mtls", action="store_true", help="mutual TLS: like --tls, and every client must present a certificate of that CA")
    command.add_argument("--auth", action="store_true", help="the master's API requires a bearer token (a secret under --state-dir; `primus token create`)")
