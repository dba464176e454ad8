"""What each verb of the primus command does: the services (up, down, restart), jobs, specs, runs and config; the
verbs that talk to a master go through primus.client (the SDK), to the master contexts.py finds."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import yaml

from primus.auth import security, tokens
from primus.client import PrimusClient
from primus.errors import DataError, InvalidRequestError, PrimusError, SpecError, UserError
from primus.explorer import DEFAULT_PORT as EXPLORE_PORT
from primus.job_state import JobState
from primus.records.scaling_log import ScalingRow, scaling_table
from primus.runtime import rpc
from primus.runtime.backend_flags import controller_argv
from primus.spec import TrainingJob, load_job_file, load_job_text, spec_versions
from primus.spec.roles import parse_role
from primus.tools import contexts
from primus.tools.cluster import (
    ClusterState,
    ServiceProcess,
    StartError,
    local_security,
    restart_service,
    running_cluster,
    start_cluster,
    start_planner,
    stop_services,
)
from primus.tools.console import console, err_console, print_plan, print_report
from primus.tools.cost import load_cost, load_report, print_cost
from primus.tools.job_output import describe_job, follow, print_data, print_jobs, print_queues
from primus.v1 import planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

EXIT_USER_ERROR = 2
EXIT_CREDENTIALS = 3  # the master refused this client's token or TLS handshake
EXIT_DENIED = 4  # the master knows who this is, and its roles do not allow the request


DEFAULT_STATE_DIR = Path(".primus")
DEFAULT_RUNS_DIR = Path("runs")
PREVIEW_TIMEOUT_SECONDS = 600.0


def master_client(args: argparse.Namespace) -> PrimusClient:
    """The master named by --master, PRIMUS_MASTER, this state folder's services or the current context, in that order."""
    local, config = running_cluster(args.state_dir), _config()
    found = contexts.resolve_master(args.master, dict(os.environ), local.address("master") if local else "", config)
    if found is None:
        raise UserError(
            f"no master to talk to: none runs for {args.state_dir} and no context is set; start one here with `primus up`, "
            f"or name one with --master, {contexts.MASTER_ENV} or `primus config set-context NAME --master HOST:PORT`"
        )
    base = security.Settings()  # the credentials of where the address came from: the local services', or the context's
    if local is not None and found.address == local.address("master"):
        base = local.client_security
    elif config.current and found.source.startswith("context"):
        given = config.credentials.get(config.current, {})
        base = security.Settings(given.get("ca", ""), given.get("cert", ""), given.get("key", ""), token=given.get("token", ""))
    return PrimusClient(found.address, credentials=_credentials(args, base))


def _credentials(args: argparse.Namespace, base: security.Settings) -> security.Settings:
    """Each of CA, certificate, key and token from its flag, else the environment (primus.auth.security), else base (the
    local services' or the context's)."""
    env = security.from_env()
    return security.Settings(
        args.ca or env.ca or base.ca, args.cert or env.cert or base.cert, args.key or env.key or base.key, token=args.token or env.token or base.token
    )


def _config() -> contexts.Config:
    try:
        return contexts.Config.load(contexts.config_path())
    except contexts.ConfigError as exc:
        raise UserError(str(exc)) from None


def _follow_and_report(client: PrimusClient, job_id: str) -> int:
    job = follow(client.watch(job_id))
    if job is not None and job.report_path and Path(job.report_path).exists():
        print_report(load_report(Path(job.report_path)))
        console.print(f"report: {job.report_path}")
    return 0 if job is not None and job.state is JobState.SUCCEEDED else 1


@contextmanager
def _cluster_for_run(args: argparse.Namespace) -> Iterator[ClusterState]:
    """Use the running cluster, or start one for this command and tear it down afterwards."""
    existing = running_cluster(args.state_dir)
    if existing is not None:
        yield existing
        return
    err_console.print("starting planner, resource_controller and master ...")
    state = _start_cluster(args)
    try:
        yield state
    finally:
        stop_services(state.services)
        (args.state_dir / "cluster.json").unlink(missing_ok=True)
        err_console.print("services stopped")


def _start_cluster(args: argparse.Namespace) -> ClusterState:
    """The services, with the backend flags given; beyond this machine they listen where its executors can reach them."""
    controller = controller_argv(args)
    chosen = getattr(args, "backend", None) or []
    remote = any(kind != "local" for kind in ([chosen] if isinstance(chosen, str) else chosen))
    try:
        secured = local_security(args.state_dir, tls=getattr(args, "tls", False), mtls=getattr(args, "mtls", False), auth=getattr(args, "auth", False))
        queues = getattr(args, "queues", None)
        master = ["--queues", str(Path(queues).resolve())] if queues else []
        return start_cluster(args.runs_dir, args.state_dir, controller, bind_host="0.0.0.0" if remote else "127.0.0.1", secured=secured, master_args=master)
    except StartError as exc:
        raise UserError(str(exc)) from None


def _load_job(path: Path) -> TrainingJob:
    """The job file, validated, with its model entry point imported and built (on the meta device: no memory): the
    one check of the model on submit (client.submit(..., model_checked=True) does not repeat it)."""
    job = load_job_file(path)
    from primus.models.entrypoint import check_entrypoint  # torch loads only for a spec that is valid so far: an error is said at once

    check_entrypoint(job.spec.training)
    return job


def cmd_validate(args: argparse.Namespace) -> int:
    """Each file in turn, in one process (torch loads once): a line for each valid one, the errors of each invalid one."""
    invalid = 0
    for path in args.job:
        try:
            job = _load_job(path)
        except SpecError as exc:
            invalid += 1
            for problem in exc.problems:
                err_console.print(f"[red]error[/red]: {problem}", highlight=False)
            continue
        sources = ", ".join(s.name for s in job.spec.data.sources)
        console.print(f"{path}: valid TrainingJob {job.metadata.name!r} (sources: {sources})")
    if invalid and len(args.job) > 1:
        err_console.print(f"{invalid} of {len(args.job)} files are not valid job specs", highlight=False)
    return EXIT_USER_ERROR if invalid else 0


def cmd_convert(args: argparse.Namespace) -> int:
    """The job file in another spec version: validated first, then every field carried over (comments are not)."""
    try:
        text = args.job.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"{args.job}: cannot read the job file ({getattr(exc, 'strerror', None) or exc})"]) from None
    load_job_text(text, str(args.job))  # one that does not validate is not converted: its errors, in its own version
    document = yaml.safe_load(text)
    converted = spec_versions.convert(document, args.to, str(args.job))
    text = yaml.safe_dump(converted, sort_keys=False)
    if args.output_file is None:
        print(text, end="")
    else:
        args.output_file.write_text(text)
        err_console.print(f"{args.job} ({document['apiVersion']}) -> {args.output_file} ({args.to})", highlight=False)
    return 0


def _start_planners(scratch: Path, replicas: int) -> list[ServiceProcess]:
    """A throwaway planner, then its replicas; everything started is stopped again if one fails to start."""
    started: list[ServiceProcess] = []
    try:
        for label in ["planner", *(f"replica-{i}" for i in range(replicas))]:
            started.append(start_planner(scratch, scratch, label))
    except BaseException:
        stop_services(started)
        raise
    return started


def _preview(address: str, spec_yaml: str, replicas: list[str]) -> planner_pb2.PreviewPlanResponse:
    channel = rpc.connect(address)
    try:
        request = planner_pb2.PreviewPlanRequest(spec_yaml=spec_yaml, replica_addresses=replicas)
        reply: planner_pb2.PreviewPlanResponse = planner_pb2_grpc.PlannerServiceStub(channel).PreviewPlan(request, timeout=PREVIEW_TIMEOUT_SECONDS)
        return reply
    finally:
        channel.close()


def cmd_plan(args: argparse.Namespace) -> int:
    job = _load_job(args.job)
    if args.replicas < 0:
        raise SpecError([f"--replicas must be 0 or more, got {args.replicas}"])
    scratch = args.state_dir / f"plan-{os.getpid()}"
    err_console.print(f"planning with a throwaway planner{f' and {args.replicas} replicas' if args.replicas else ''} ...")
    planners = _start_planners(scratch, args.replicas)
    try:
        preview = _preview(planners[0].address, job.to_yaml(), [p.address for p in planners[1:]])
    finally:
        stop_services(planners)
        shutil.rmtree(scratch, ignore_errors=True)
    print_plan(preview, args.explain)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    if running_cluster(args.state_dir) is not None:
        raise PrimusError(f"services for {args.state_dir} are already running; `primus down` stops them")
    state = _start_cluster(args)
    for service in state.services:
        console.print(f"{service.name:<20} pid {service.pid:<8} {service.address}  log {service.log}")
    secured = state.services_security
    if secured.tls or secured.token_secret_file:
        said = [security.describe(secured), *(["every call behind tokens and roles"] if secured.token_secret_file else [])]
        console.print(f"security: {', '.join(said)}; certificates, secret and access policy in {args.state_dir / 'security'}", highlight=False)
        if not secured.token_secret_file and not secured.mtls:
            err_console.print("[yellow]warning[/yellow]: --tls alone encrypts but authenticates no one: add --auth (tokens) or use --mtls", highlight=False)
    path, config = contexts.config_path(), _config()
    config.set_context(contexts.LOCAL_CONTEXT, state.address("master"), make_current=True, credentials=dict(state.client))
    config.save(path)
    console.print(f"context {contexts.LOCAL_CONTEXT!r} in {path} now names this master; from anywhere: primus get jobs", highlight=False)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state = ClusterState.load(args.state_dir / "cluster.json")
    if state is None:
        console.print("nothing is running")
        return 0
    stopped = stop_services(state.services)
    (args.state_dir / "cluster.json").unlink(missing_ok=True)
    console.print(f"stopped: {', '.join(stopped) or 'nothing (already gone)'}")
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    state = ClusterState.load(args.state_dir / "cluster.json")  # the service to restart may be dead: that is the point
    if state is None:
        raise PrimusError(f"no Primus services were started for {args.state_dir}: start them with `primus up`")
    restarted = restart_service(state, args.state_dir, args.service)
    service = next(s for s in restarted.services if s.name == args.service)
    console.print(f"{service.name:<20} pid {service.pid:<8} {service.address}  log {service.log}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    job = _load_job(args.job)  # a spec error is the user's to fix whether or not a master answers
    with master_client(args) as client:
        job_id = client.submit(job, from_savepoint=args.from_savepoint, model_checked=True)
        console.print(job_id)
        return _follow_and_report(client, job_id) if args.watch else 0


def cmd_get(args: argparse.Namespace) -> int:
    if args.kind == "queues":
        if args.job_id:
            raise InvalidRequestError(f"`primus get queues` takes no name (got {args.job_id!r}): it lists every queue")
        with master_client(args) as client:
            print_queues(client.queues(), args.output)
        return 0
    with master_client(args) as client:
        jobs = [client.get(args.job_id)] if args.job_id else client.list()
    print_jobs(jobs, args.output)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        job = client.get(args.job_id)
    if args.output == "table":
        describe_job(job)
    else:
        print_jobs([job], args.output)
    return 0


def cmd_savepoint(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        taken = client.savepoint(args.job_id, args.name)
    if args.output == "table":
        console.print(f"{taken['job_id']}: savepoint {taken['name']!r} at step {taken['steps']}: {taken['path']}", highlight=False)
    else:
        print_data(taken, args.output)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        for executor_id, line in client.logs(args.job_id, follow=args.follow, executor_id=args.executor, tail=args.tail):
            console.print(line if args.executor else f"{executor_id} | {line}", highlight=False, markup=False)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        jobs = [client.get(args.job_id)] if args.job_id else client.list()
    if args.output != "table":
        print_jobs(jobs, args.output)
        return 0
    for job in jobs:
        p = job.progress
        console.print(f"{job.job_id:<40} {job.state.value:<10} tasks {p.tasks_done}/{p.tasks_total} step {p.step}  {job.message}")
    return 0


# One-job verbs that ask the master for a change of state: what each does (its help), and what it then says.
LIFECYCLE_VERBS = {
    "cancel": ("cancel a job; its executors are released", "cancellation requested"),
    "suspend": ("release a running job's executors, keeping its plan and last committed checkpoint", "suspend requested; executors released, plan and checkpoint kept"),
    "resume": ("launch a suspended job's executors again; training goes on from its last committed checkpoint", "resuming from its last committed checkpoint"),
}


def cmd_lifecycle(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        job = {"cancel": client.cancel, "suspend": client.suspend, "resume": client.resume}[args.command](args.job_id)
    console.print(f"{job.job_id}: {LIFECYCLE_VERBS[args.command][1]}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        job = client.stop(args.job_id)
        console.print(f"{job.job_id}: stop requested; training finishes where it is, then evaluation and the report")
        return _follow_and_report(client, job.job_id) if args.watch else 0


def cmd_delete(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        run_dir, purged = client.delete(args.job_id, purge=args.purge)
    console.print(f"{args.job_id}: deleted; its run folder {run_dir} {'deleted too' if purged else 'kept'}", highlight=False)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    with master_client(args) as client:
        if (args.min is None) != (args.max is None):
            raise UserError("primus scale: --min and --max go together (the autoscale bounds)")
        if args.replicas is None and args.min is None:
            raise UserError("primus scale needs --replicas N, or --min N --max M")
        bounds = (args.min, args.max) if args.min is not None and args.max is not None else None
        job, launched, draining = client.scale(args.job_id, parse_role(args.role), args.replicas or 0, args.reason, bounds)
    said = f"{args.role} set to {args.replicas}" if bounds is None else job.message
    console.print(f"{job.job_id}: {said} ({launched} launched, {draining} draining)", highlight=False)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    path = contexts.config_path()
    config = _config()
    if args.action == "get-contexts":
        for name, master in sorted(config.contexts.items()):
            console.print(f"{'*' if name == config.current else ' '} {name:<20} {master}", highlight=False)
        return 0
    if args.action == "current-context":
        if not config.current:
            raise UserError(f"{path}: no current context")
        console.print(config.current)
        return 0
    if not args.name:
        raise UserError(f"primus config {args.action} needs a context name")
    if args.action == "set-context":
        if not args.context_master:
            raise UserError("primus config set-context needs --master HOST:PORT")
        given = {"ca": args.ca, "cert": args.cert, "key": args.key, "token": args.token}  # `primus --ca X --token T config set-context ...`
        config.set_context(args.name, args.context_master, credentials=given if any(given.values()) else None)
    else:  # use-context
        try:
            config.use(args.name, path)
        except contexts.ConfigError as exc:
            raise UserError(str(exc)) from None
    config.save(path)
    console.print(f"{path}: current context {config.current!r}", highlight=False)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    job = _load_job(args.job)
    with _cluster_for_run(args) as state, PrimusClient(state.address("master"), credentials=_credentials(args, state.client_security)) as client:
        job_id = client.submit(job.with_backend(args.backend) if args.backend else job, model_checked=True)  # _load_job checked it
        err_console.print(f"submitted {job_id}")
        code = _follow_and_report(client, job_id)
    console.print(f"explore: {explore_hint(args.runs_dir, job_id)}", highlight=False, soft_wrap=True)
    return code


def explore_hint(runs_dir: Path, job_id: str) -> str:
    """The command that opens a job in the explorer, and the page to open then."""
    return f"primus explore --runs-dir {runs_dir} {job_id}, then open http://127.0.0.1:{EXPLORE_PORT}/#/jobs/{job_id}"


def cmd_demo(args: argparse.Namespace) -> int:
    from primus.tools.demo import write_demo

    job_file = write_demo(args.data_dir, days=args.days, rows_per_hour=args.rows_per_hour, seed=args.seed, progress=err_console.print)
    args.job = job_file
    return cmd_run(args)


def runs_location(text: str) -> Path | str:
    """A runs folder as a Path, or an object store URI kept as written (a Path would fold its //)."""
    return text if "://" in text and not text.startswith("file://") else Path(text.removeprefix("file://"))


def _report_path(args: argparse.Namespace) -> Path:
    """RUN may be a run folder, its report.json, or a job id under --runs-dir; a folder (or a report) on an object store
    (s3://...) is copied here first."""
    from primus.runtime import run_store  # pyarrow's file systems only for a run on an object store

    text = str(args.run)
    if run_store.is_object_uri(text):
        try:
            return run_store.fetch_run(text.removesuffix("/report.json")) / "report.json"
        except (OSError, FileNotFoundError) as exc:
            raise PrimusError(f"no run folder at {text}: {exc}") from None
    run = Path(text)
    path = run if run.name == "report.json" else run / "report.json"
    if path.exists():
        return path
    if isinstance(args.runs_dir, str):  # a job id under runs on an object store
        return run_store.fetch_run(f"{args.runs_dir.rstrip('/')}/{run}") / "report.json"
    candidate: Path = args.runs_dir / run / "report.json"
    if not candidate.exists():
        raise PrimusError(f"no report at {path} or {candidate}")
    return candidate


def cmd_report(args: argparse.Namespace) -> int:
    path = _report_path(args)
    report = load_report(path)
    if not report.job_id:  # a JSON object, but not a job report
        raise DataError(f"report {path} is not a job report Primus wrote: it names no job_id")
    if args.output != "table":
        print_data(report.to_json(), args.output)
        return 0
    print_report(report)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    cost = load_cost(_report_path(args).parent)
    if args.output == "table":
        print_cost(cost)
    else:
        print_data(cost.to_dict(), args.output)
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    from primus.explorer.server import make_server
    from primus.explorer.store import RunStore

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    runs_dir = args.runs_dir
    if isinstance(runs_dir, str):  # runs on an object store: read from a copy here, kept current by a thread
        from primus.runtime import run_store

        runs_dir = run_store.local_folder(runs_dir)
        run_store.RunsCopy(args.runs_dir, runs_dir).start()
    store = RunStore(runs_dir, args.run)
    secret_file = args.token_secret_file or os.environ.get(security.SECRET_ENV, "")
    secret = tokens.read_secret(secret_file) if secret_file else None
    if not args.run and not store.runs_dir.is_dir():
        err_console.print(f"[yellow]warning[/yellow]: no runs folder {args.runs_dir} yet: the list fills when a job writes there or sends spans to /v1/traces")
    try:
        server = make_server(store, args.host, args.port, secret)
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; pick another with --port (0: any free port)") from None
    if args.host not in ("127.0.0.1", "localhost", "::1") and secret is None:
        err_console.print(
            f"[yellow]warning[/yellow]: listening on {args.host}: anyone who can reach it reads these runs and can send spans (--token-secret-file asks for tokens)"
        )
    if secret is not None:
        err_console.print("every request needs a Primus user token: open /?token=TOKEN once (primus token create --subject NAME)")
    url = server.url
    console.print(f"explorer: {url}", highlight=False, soft_wrap=True)
    for job_id in store.pinned or {}:
        console.print(f"  {job_id}: {url}#/jobs/{job_id}", highlight=False, soft_wrap=True)
    console.print(f"OTLP/HTTP JSON spans: POST {url}v1/traces; Ctrl-C stops it", highlight=False, soft_wrap=True)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        err_console.print("explorer stopped")
    finally:
        server.server_close()
    return 0


# The controller is away, or (under --auth) serves the services only: the job's saved report has the decisions.
_SCALING_LOG_AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


def _scaling_rows(args: argparse.Namespace) -> list[ScalingRow]:
    """From the running resource controller, or else from the job's saved report."""
    state = running_cluster(args.state_dir)
    if state is not None:
        stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(state.address("resource_controller"), credentials=_credentials(args, state.client_security)))
        try:
            decisions = stub.GetScalingLog(rc_pb2.GetScalingLogRequest(job_id=str(args.run)), timeout=10).decisions
        except grpc.RpcError as exc:
            if exc.code() not in _SCALING_LOG_AWAY:
                raise
        else:
            if decisions:
                return [ScalingRow.of_proto(d) for d in decisions]
    return list(load_report(_report_path(args)).scaling)


def cmd_scaling(args: argparse.Namespace) -> int:
    rows = _scaling_rows(args)
    if args.output == "json":
        print(json.dumps([row.to_json() for row in rows], indent=2))
    elif not rows:
        console.print(f"no scaling decisions for {args.run}: its roles have no autoscale block, or nothing called for a change")
    else:
        console.print(scaling_table(rows, f"scaling decisions of {args.run}"))
    return 0
