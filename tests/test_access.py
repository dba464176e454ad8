"""Who may call what: the method table, the authenticator's principals, and the guard on a real gRPC server and Flight."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from primus.auth import access, security, tokens
from primus.auth.access import Audience
from primus.auth.guards import RefusedError, caller, for_settings
from primus.auth.identity import ANONYMOUS, Authenticator, JobTokens, Kind, OwnJobToken, Principal, SignedTokens
from primus.runtime import rpc
from primus.v1 import planner_pb2, planner_pb2_grpc

SECRET = tokens.new_secret()
ALICE = Principal(Kind.USER, "alice")
SERVICE = Principal(Kind.SERVICE, "primus-services")
JOB_A = Principal(Kind.JOB, "job-a", job_id="job-a")
PLANNER, CONTROLLER, MASTER = "/primus.v1.PlannerService/", "/primus.v1.ResourceControllerService/", "/primus.v1.MasterService/"


def test_every_rpc_of_every_service_has_an_audience_and_unknown_ones_are_closed() -> None:
    from primus.v1 import data_executor_pb2, master_pb2, resource_controller_pb2, trainer_pb2

    for module in (planner_pb2, master_pb2, resource_controller_pb2, data_executor_pb2, trainer_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                name = f"/{service.full_name}/{method.name}"
                assert access.audience(name) is not Audience.OPEN, f"{name} is open to anyone"
    assert access.audience("/primus.v1.PlannerService/SomethingNew") is Audience.SERVICES
    assert access.audience("/grpc.health.v1.Health/Check") is Audience.OPEN
    assert access.audience("/primus.v1.InfoService/GetServiceInfo") is Audience.OPEN


MUTATING_INTERNAL = [f"{PLANNER}DropPlan", f"{PLANNER}CreatePlan", f"{CONTROLLER}ReleaseExecutors", f"{CONTROLLER}LaunchExecutors", f"{CONTROLLER}ScaleRole"]


@pytest.mark.parametrize("method", MUTATING_INTERNAL)
def test_mutating_internal_methods_are_for_services_only(method: str) -> None:
    assert access.refusal(SERVICE, method, "job-a") == ""
    assert "a user may call the master's API only" in access.refusal(ALICE, method, "job-a")
    assert "only the Primus services" in access.refusal(JOB_A, method, "job-a")
    assert "anonymous" in access.refusal(ANONYMOUS, method, "job-a")


def test_a_jobs_credential_reaches_its_own_job_only() -> None:
    for method in (f"{PLANNER}LeaseTask", f"{PLANNER}CompleteTasks", f"{CONTROLLER}Heartbeat", "/primus.v1.DataExecutorService/Flight/DoExchange"):
        assert access.refusal(JOB_A, method, "job-a") == ""
        assert access.refusal(JOB_A, method, "job-b") == "the credential of job job-a may not act on job job-b"
        assert "must name its job" in access.refusal(JOB_A, method, "")
        assert "a user may call the master's API only" in access.refusal(ALICE, method, "job-a")
    assert access.refusal(JOB_A, f"{MASTER}GetJob", "job-a") == ""
    assert "may read only that job" in access.refusal(JOB_A, f"{MASTER}GetJob", "job-b")
    assert "may read only that job" in access.refusal(JOB_A, f"{MASTER}CancelJob", "job-a")
    assert access.refusal(ALICE, f"{MASTER}CancelJob", "job-a") == "", "the master decides by the user's roles"


def test_the_authenticator_finds_each_kind_of_caller() -> None:
    authenticator = Authenticator([SignedTokens(SECRET), JobTokens(SECRET)], require_token=True)
    user = tokens.create_token(SECRET, "alice", 60)
    service = tokens.create_token(SECRET, "primus-services", 60, kind=tokens.TokenKind.SERVICE)
    assert authenticator.authenticate(f"Bearer {user}").kind is Kind.USER
    assert authenticator.authenticate(f"Bearer {service}") == Principal(Kind.SERVICE, "primus-services", token_id=tokens.verify_token(SECRET, service).token_id)
    assert authenticator.authenticate(f"Bearer {tokens.job_token(SECRET, 'job-a')}") == JOB_A
    with pytest.raises(tokens.TokenError, match="missing bearer token"):
        authenticator.authenticate("", ["service"])  # under --auth a certificate alone is not enough
    forged = tokens.job_token(SECRET, "job-a").replace("job-a", "job-b")
    with pytest.raises(tokens.TokenError, match="does not match"):
        authenticator.authenticate(f"Bearer {forged}")
    with pytest.raises(tokens.TokenError, match="unrecognised"):
        authenticator.authenticate("Bearer eyJhbGciOi.x.y")
    revoked = {tokens.verify_token(SECRET, user).token_id}
    authenticator.revoked = revoked.__contains__
    with pytest.raises(tokens.TokenError, match="was revoked"):
        authenticator.authenticate(f"Bearer {user}")  # remembered as verified, and still asked about revocation


def test_certificates_name_the_caller_under_mutual_tls_alone() -> None:
    authenticator = Authenticator([], require_token=False, service_names=frozenset({"service", "master.prod"}))
    assert authenticator.authenticate("", ["master.prod"]).kind is Kind.SERVICE
    assert authenticator.authenticate("", ["client"]) == Principal(Kind.USER, "client")
    assert authenticator.authenticate("", []) is ANONYMOUS


def test_a_jobs_process_admits_its_own_credential_only() -> None:
    own = tokens.job_token(SECRET, "job-a")
    guard = for_settings(own, "", mtls=False)
    assert guard is not None and guard.own_job == "job-a"
    assert guard.admit("/primus.v1.DataExecutorService/DrainExecutor", f"Bearer {own}", (), "") == JOB_A
    other = tokens.job_token(SECRET, "job-b")
    with pytest.raises(RefusedError, match="not the credential of job job-a") as refused:
        guard.admit("/primus.v1.DataExecutorService/DrainExecutor", f"Bearer {other}", (), "")
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert isinstance(guard.authenticator._verifiers[0], OwnJobToken)
    assert for_settings("", "", mtls=False) is None, "security off: no guard, nothing changes"


class _Planner(planner_pb2_grpc.PlannerServiceServicer):
    def DropPlan(self, request: planner_pb2.DropPlanRequest, context: grpc.ServicerContext) -> planner_pb2.DropPlanResponse:
        assert caller().kind is Kind.SERVICE
        return planner_pb2.DropPlanResponse()

    def LeaseTask(self, request: planner_pb2.LeaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.LeaseTaskResponse:
        return planner_pb2.LeaseTaskResponse()


@pytest.fixture()
def guarded_planner(tmp_path: Path) -> Iterator[str]:
    secret_file = tmp_path / "token.secret"
    secret_file.write_bytes(SECRET)
    settings = security.Settings(token_secret_file=str(secret_file))
    running = rpc.start_server(
        "planner", "127.0.0.1:0", [lambda s: planner_pb2_grpc.add_PlannerServiceServicer_to_server(_Planner(), s)], ["primus.v1.PlannerService"], credentials=settings
    )
    yield running.address
    running.stop(0)


def _call(address: str, token: str, call: str, request: object) -> grpc.StatusCode:
    channel = rpc.connect(address, credentials=security.Settings(token=token))
    try:
        getattr(planner_pb2_grpc.PlannerServiceStub(channel), call)(request, timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    finally:
        channel.close()


def test_a_guarded_server_refuses_users_strangers_and_other_jobs(guarded_planner: str, caplog: pytest.LogCaptureFixture) -> None:
    drop, lease_b = planner_pb2.DropPlanRequest(job_id="job-a"), planner_pb2.LeaseTaskRequest(job_id="job-b", executor_id="x")
    service = tokens.create_token(SECRET, "primus-services", 60, kind=tokens.TokenKind.SERVICE)
    assert _call(guarded_planner, service, "DropPlan", drop) is grpc.StatusCode.OK
    assert _call(guarded_planner, "", "DropPlan", drop) is grpc.StatusCode.UNAUTHENTICATED
    assert _call(guarded_planner, tokens.create_token(SECRET, "alice", 60), "DropPlan", drop) is grpc.StatusCode.PERMISSION_DENIED
    assert _call(guarded_planner, tokens.job_token(SECRET, "job-a"), "LeaseTask", lease_b) is grpc.StatusCode.PERMISSION_DENIED
    assert _call(guarded_planner, tokens.job_token(SECRET, "job-b"), "LeaseTask", lease_b) is grpc.StatusCode.OK
    said = caplog.text
    assert "refused /primus.v1.PlannerService/DropPlan from ipv4:127.0.0.1" in said and "PERMISSION_DENIED: user alice" in said
    assert "refused /primus.v1.PlannerService/LeaseTask" in said and "job job-a may not act on job job-b" in said


def test_flight_serves_only_the_executors_own_job() -> None:
    table = pa.table({"x": list(range(10))})

    class Tables(flight.FlightServerBase):  # type: ignore[misc]
        def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
            return flight.RecordBatchStream(table)

    own = security.Settings(token=tokens.job_token(SECRET, "job-a"))
    server = Tables("grpc://127.0.0.1:0", middleware=security.flight_middleware(own))
    try:
        address = f"127.0.0.1:{server.port}"
        assert security.flight_connect(address, own).do_get(flight.Ticket(b"t")).read_all().equals(table)
        with pytest.raises(flight.FlightUnauthenticatedError, match="not the credential of job job-a"):
            security.flight_connect(address, security.Settings(token=tokens.job_token(SECRET, "job-b"))).do_get(flight.Ticket(b"t")).read_all()
        with pytest.raises(flight.FlightUnauthenticatedError, match="missing bearer token"):
            security.flight_connect(address, security.Settings()).do_get(flight.Ticket(b"t")).read_all()
    finally:
        server.shutdown()
