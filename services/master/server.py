"""Master server assembly: store, driver, servicer, health and reflection."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from primus.auth import jwt_tokens, rbac, security, tokens
from primus.runtime import metrics_http, rpc
from primus.runtime.settings import MasterSettings
from primus.v1 import access_pb2, access_pb2_grpc, common_pb2, master_pb2, master_pb2_grpc
from services.master.access import AccessRecords, AccessServicer, Gate, PolicyFile
from services.master.driver import JobDriver
from services.master.peers import Peers
from services.master.prometheus import master_metrics
from services.master.queueing import Admitter
from services.master.queues import QueueBook
from services.master.servicer import MasterServicer
from services.master.store import JobStore

SERVICE_NAME = master_pb2.DESCRIPTOR.services_by_name["MasterService"].full_name
ACCESS_SERVICE_NAME = access_pb2.DESCRIPTOR.services_by_name["AccessService"].full_name


@dataclass
class Master:
    running: rpc.RunningServer
    store: JobStore
    driver: JobDriver
    admitter: Admitter


def create_server(
    bind: str,
    runs_dir: Path | str,
    db_path: Path | str,
    planner_addresses: tuple[str, ...],
    rc_address: str,
    advertise: str = "",
    metrics_port: int = metrics_http.OFF,
    settings: MasterSettings | None = None,
    access_policy: str | None = None,
    queues: QueueBook | None = None,
) -> Master:
    """planner_addresses: one planner, or several the job set is shared among (a job's plan and tasks at one of them,
    services/master/shards.py). metrics_port: where Prometheus /metrics is served, on the bind host (0: a free port; OFF: not served). settings:
    the master's timings (default: MasterSettings()). access_policy: the role bindings file (default:
    PRIMUS_ACCESS_POLICY; none: users see and change their own jobs only). Security (TLS, tokens, an identity
    provider's JWTs) comes from the environment (primus.auth.security, primus.auth.jwt_tokens). queues: the queues and priority
    classes jobs are admitted through (default: none, every job admitted at once)."""
    settings = settings or MasterSettings()
    credentials = security.from_env()
    policy = PolicyFile(os.environ.get(rbac.POLICY_ENV, "") if access_policy is None else access_policy)
    store = JobStore(db_path)
    records = AccessRecords(store)
    gate = Gate(policy)
    holder: dict[str, rpc.RunningServer] = {}

    def own_info() -> common_pb2.ServiceInfo:
        running = holder["server"]
        return common_pb2.ServiceInfo(name="master", pid=os.getpid(), address=advertise or running.address, version=rpc.VERSION, metrics_address=running.metrics_address)

    driver = JobDriver(store, Peers(planner_addresses, rc_address), own_info, settings)
    admitter = Admitter(store, driver, queues or QueueBook(), records)
    driver.on_job_change = admitter.wake
    servicer = MasterServicer(store, driver, runs_dir, settings, gate, records, admitter=admitter)
    secret = tokens.read_secret(credentials.token_secret_file) if credentials.token_secret_file else None
    access = AccessServicer(records, gate, secret)
    jwt = jwt_tokens.settings_from_env()
    metrics = metrics_http.serve(metrics_http.host_of(bind), metrics_port)
    loops = {"job_look": driver.looks, "admission_pass": admitter.passes, "launch_wait": driver.launch_waits}
    metrics.add(lambda: master_metrics(store, admitter.snapshot, loops, driver.watches.reads))
    registrations = [
        lambda s: master_pb2_grpc.add_MasterServiceServicer_to_server(servicer, s),
        lambda s: access_pb2_grpc.add_AccessServiceServicer_to_server(access, s),
    ]
    verifiers = [jwt_tokens.JwtTokens(jwt)] if jwt is not None else []
    running = rpc.start_server("master", bind, registrations, [SERVICE_NAME, ACCESS_SERVICE_NAME], metrics=metrics, credentials=credentials, verifiers=verifiers)
    if running.guard is not None:
        running.guard.authenticator.revoked = records.is_revoked
        running.guard.on_refusal = records.refused
    holder["server"] = running
    driver.recover()
    admitter.start()
    return Master(running=running, store=store, driver=driver, admitter=admitter)
