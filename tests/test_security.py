"""TLS, mutual TLS and bearer tokens against real services: refusals for each wrong credential, and a job end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from primus.auth import security, tokens
from primus.client import AccessDeniedError, CredentialsRefusedError, PrimusClient
from primus.runtime import rpc
from primus.spec import parse_job
from primus.tools import certs, contexts
from primus.tools.cluster import ClusterState, local_security, restart_service, start_cluster, stop_services
from primus.v1 import planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_pb2_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, assert_every_call_was_checked, job_document


def test_token_round_trip_and_each_refusal() -> None:
    secret = tokens.new_secret()
    token = tokens.create_token(secret, "alice", 60, now=1000.0)
    claims = tokens.verify_token(secret, token, now=1059.0)
    assert claims.subject == "alice" and claims.kind is tokens.TokenKind.USER and len(claims.token_id) == 16
    with pytest.raises(tokens.TokenError, match="expired"):
        tokens.verify_token(secret, token, now=1060.0)
    with pytest.raises(tokens.TokenError, match="another secret"):
        tokens.verify_token(tokens.new_secret(), token, now=1001.0)
    version, _claims, signature = token.split(".")
    forged = tokens._b64(json.dumps({"sub": "root", "iat": 1000, "exp": 99999999999, "kind": "service"}).encode())
    with pytest.raises(tokens.TokenError, match="another secret"):
        tokens.verify_token(secret, f"{version}.{forged}.{signature}", now=1001.0)
    with pytest.raises(tokens.TokenError, match="malformed"):
        tokens.verify_token(secret, "Bearer nonsense", now=1001.0)
    assert tokens.parse_ttl("1h") == 3600 and tokens.parse_ttl("90s") == 90 and tokens.parse_ttl("2d") == 172800
    with pytest.raises(tokens.TokenError, match="--ttl"):
        tokens.parse_ttl("soon")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterState, Path]]:
    """Planner, resource controller and master under mutual TLS, the master's API behind a token."""
    root = tmp_path_factory.mktemp("secured")
    state = start_cluster(root / "runs", root / "state", secured=local_security(root / "state", mtls=True, auth=True))
    yield state, root
    final = ClusterState.load(root / "state" / "cluster.json")
    stop_services((final or state).services)


def _current(secured: tuple[ClusterState, Path]) -> ClusterState:
    """The secured cluster as it is now: a test that restarted a service saved the new one (stop what runs, not a pid
    that is gone)."""
    state, root = secured
    return ClusterState.load(root / "state" / "cluster.json") or state


def _master_log(state: ClusterState) -> str:
    return Path(next(s.log for s in state.services if s.name == "master")).read_text(errors="replace")


def test_the_local_user_gets_in_and_every_wrong_credential_is_refused(secured: tuple[ClusterState, Path]) -> None:
    state, root = _current(secured), secured[1]
    user = state.client_security
    assert user.ca and user.cert and user.key and user.token
    with PrimusClient(state.address("master"), timeout=10, credentials=user) as client:
        assert all(job.owner == "local-user" for job in client.list()), "the local user sees its own jobs"
    secret = tokens.read_secret(state.services_security.token_secret_file)
    other_ca = certs.create_ca(root / "other")
    other_client = certs.issue(other_ca, root / "other", "client", hosts=[], server=False)
    wrong = {
        "missing token": (security.Settings(user.ca, user.cert, user.key), "missing bearer token"),
        "expired token": (user.with_client(token=tokens.create_token(secret, "bob", 1, now=time.time() - 10)), "expired"),
        "token of another secret": (user.with_client(token=tokens.create_token(tokens.new_secret(), "eve", 60)), "another secret"),
        "no client certificate (mTLS)": (security.Settings(ca=user.ca, token=user.token), "TLS handshake"),
        "client certificate of another CA": (security.Settings(user.ca, str(other_client.cert), str(other_client.key), token=user.token), "TLS handshake"),
        "server not trusted (wrong CA)": (security.Settings(str(other_ca.cert), user.cert, user.key, token=user.token), "TLS handshake"),
        "plaintext": (security.Settings(token=user.token), "TLS handshake"),
    }
    for case, (credentials, said) in wrong.items():
        with PrimusClient(state.address("master"), timeout=10, credentials=credentials) as client:
            with pytest.raises(CredentialsRefusedError, match=said):
                client.list()
            print(case, "refused")
    log = _master_log(state)
    assert log.count("refused /primus.v1.MasterService/ListJobs") >= 3, log[-2000:]
    assert "UNAUTHENTICATED: missing bearer token" in log and "expired at" in log and "another secret" in log
    assert "Handshake failed" in log and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in log, "gRPC's core logs each refused handshake"


def _internal_calls(state: ClusterState, credentials: security.Settings) -> dict[str, grpc.StatusCode]:
    """What the planner's DropPlan and the controller's ReleaseExecutors answer these credentials."""
    answers = {}
    for service, call in (("planner", "DropPlan"), ("resource_controller", "ReleaseExecutors")):
        channel = rpc.connect(state.address(service), credentials=credentials)
        try:
            if service == "planner":
                planner_pb2_grpc.PlannerServiceStub(channel).DropPlan(planner_pb2.DropPlanRequest(job_id="someone-elses"), timeout=10)
            else:
                rc_pb2_grpc.ResourceControllerServiceStub(channel).ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id="someone-elses"), timeout=10)
            answers[call] = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            answers[call] = exc.code()
        finally:
            channel.close()
    return answers


def test_the_planner_and_controller_refuse_users_and_strangers(secured: tuple[ClusterState, Path]) -> None:
    state = _current(secured)
    user, services = state.client_security, state.services_security
    denied, unauthenticated = grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED
    assert _internal_calls(state, user) == {"DropPlan": denied, "ReleaseExecutors": denied}, "the user's certificate and token"
    no_token = security.Settings(user.ca, user.cert, user.key)
    assert _internal_calls(state, no_token) == {"DropPlan": unauthenticated, "ReleaseExecutors": unauthenticated}, "the user's certificate alone"
    secret = tokens.read_secret(services.token_secret_file)
    job = user.with_client(token=tokens.job_token(secret, "another-job"))
    assert _internal_calls(state, job) == {"DropPlan": denied, "ReleaseExecutors": denied}, "a job's credential"
    assert _internal_calls(state, services) == {"DropPlan": grpc.StatusCode.OK, "ReleaseExecutors": grpc.StatusCode.OK}
    channel = rpc.connect(state.address("planner"), credentials=job)
    try:
        lease = planner_pb2.LeaseTaskRequest(job_id="job-b", executor_id="another-job-data-executor-0")
        with pytest.raises(grpc.RpcError) as refused:
            planner_pb2_grpc.PlannerServiceStub(channel).LeaseTask(lease, timeout=10)
        assert refused.value.code() is denied and "the credential of job another-job may not act on job job-b" in str(refused.value.details())
    finally:
        channel.close()
    logs = {s.name: Path(s.log).read_text(errors="replace") for s in state.services}
    assert "refused /primus.v1.PlannerService/DropPlan from ipv4:127.0.0.1" in logs["planner"] and "PERMISSION_DENIED: user local-user" in logs["planner"]
    assert "refused /primus.v1.ResourceControllerService/ReleaseExecutors" in logs["resource_controller"]


def test_flight_serves_over_mutual_tls_only(tmp_path: Path) -> None:
    ca = certs.create_ca(tmp_path)
    server_cert = certs.issue(ca, tmp_path, "service")
    settings = security.Settings(str(ca.cert), str(server_cert.cert), str(server_cert.key), mtls=True)
    table = pa.table({"x": list(range(100))})

    class Tables(flight.FlightServerBase):  # type: ignore[misc]
        def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
            return flight.RecordBatchStream(table)

    server = Tables(security.flight_location("127.0.0.1:0", settings), **security.flight_server_kwargs(settings))
    try:
        address = f"127.0.0.1:{server.port}"
        client = security.flight_connect(address, settings)
        assert client.do_get(flight.Ticket(b"t")).read_all().equals(table)
        for refused in (security.Settings(ca=str(ca.cert)), security.Settings()):
            with pytest.raises(flight.FlightUnavailableError):
                security.flight_connect(address, refused).do_get(flight.Ticket(b"t"), options=flight.FlightCallOptions(timeout=5)).read_all()
    finally:
        server.shutdown()


def _primus(tmp_path: Path, *args: str, state: str = "state", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / state), "--runs-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_a_job_runs_end_to_end_under_mutual_tls_and_tokens(job_file: Path, tmp_path: Path) -> None:
    result = _primus(tmp_path, "run", "--mtls", "--auth", str(job_file))
    assert result.returncode == 0, result.stderr + result.stdout
    (path,) = (tmp_path / "runs").glob("ctr-demo-*/report.json")
    report = json.loads(path.read_text())
    assert report["state"] == "SUCCEEDED"
    (source,) = report["sources"]
    assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR and source["retries"] == 0
    assert report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR
    assert report["trainer"]["eval_samples"] == 24 * ROWS_PER_HOUR
    assert len(list((tmp_path / "runs").glob("ctr-demo-*/logs/*data-executor-*.log"))) == 2
    assert_every_call_was_checked(tmp_path / "runs", tmp_path / "state", report["job_id"])
    for service in ("master", "planner", "resource_controller"):
        text = (tmp_path / "state" / "logs" / f"{service}.log").read_text(errors="replace")
        assert "over mutual TLS, every call authenticated (bearer tokens) and authorised" in text, text[:2000]


def test_cli_refuses_without_credentials_and_accepts_a_created_token(tmp_path: Path) -> None:
    up = _primus(tmp_path, "up", "--tls", "--auth")
    assert up.returncode == 0, up.stderr + up.stdout
    assert "security: TLS, every call behind tokens and roles" in up.stdout
    try:
        state = ClusterState.load(tmp_path / "state" / "cluster.json")
        assert state is not None
        master, ca = state.address("master"), state.client_security.ca
        assert _primus(tmp_path, "get", "jobs").returncode == 0, "the local user's credentials come from the state folder"
        config = contexts.Config.load(contexts.config_path())
        assert config.current == contexts.LOCAL_CONTEXT and set(config.credentials[contexts.LOCAL_CONTEXT]) == {"ca", "token"}
        assert _primus(tmp_path, "get", "jobs", state="elsewhere").returncode == 0, "from elsewhere, the context's credentials"
        refused = _primus(tmp_path, "--master", master, "--ca", ca, "get", "jobs", state="elsewhere")
        assert refused.returncode == 3 and "refused the token" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        anonymous = _internal_calls(state, security.Settings(ca=ca))
        assert anonymous == {"DropPlan": grpc.StatusCode.UNAUTHENTICATED, "ReleaseExecutors": grpc.StatusCode.UNAUTHENTICATED}, "a client that only trusts the CA"
        plaintext = _primus(tmp_path, "--master", master, "get", "jobs", state="elsewhere")
        assert plaintext.returncode == 3 and "TLS handshake" in plaintext.stderr, plaintext.stderr
        token = _primus(tmp_path, "token", "create", "--subject", "alice", "--ttl", "1h")
        assert token.returncode == 0 and token.stdout.startswith("v1."), token.stderr
        env_ok = _primus(tmp_path, "--master", master, "--ca", ca, "--token", token.stdout.strip(), "get", "jobs", "-o", "json", state="elsewhere")
        assert env_ok.returncode == 0 and json.loads(env_ok.stdout) == [], env_ok.stderr
        short = _primus(tmp_path, "token", "create", "--subject", "alice", "--ttl", "soon")
        assert short.returncode == 2 and "--ttl: 'soon'" in short.stderr
    finally:
        _primus(tmp_path, "down")


def test_roles_decide_who_changes_a_job_revoked_tokens_are_refused_and_the_audit_survives_a_restart(secured: tuple[ClusterState, Path], dataset: Path) -> None:
    state, root = _current(secured), secured[1]
    local = state.client_security
    document = job_document(dataset)
    document["metadata"]["namespace"] = "team-a"
    job = parse_job(document)
    with PrimusClient(state.address("master"), timeout=30, credentials=local) as admin:
        issued = {name: admin.create_token(name, 600) for name in ("mallory", "bob", "carol", "dave")}
        policy = Path(state.services_security.access_policy)
        more = ("{namespace: team-b, role: editor, users: [bob]}", "{namespace: team-a, role: viewer, users: [carol]}")
        policy.write_text(policy.read_text() + "".join(f"- {binding}\n" for binding in more))
        job_id = admin.submit(job)
        assert admin.get(job_id).namespace == "team-a" and admin.get(job_id).owner == "local-user"

        def as_user(name: str) -> PrimusClient:
            return PrimusClient(state.address("master"), timeout=30, credentials=local.with_client(token=issued[name].token))

        with as_user("mallory") as mallory, pytest.raises(AccessDeniedError, match="user mallory may not change in namespace 'team-a'"):
            mallory.cancel(job_id)
        with as_user("mallory") as mallory:
            assert [j.job_id for j in mallory.list()] == [], "get lists only what you may see"
        with as_user("bob") as bob, pytest.raises(AccessDeniedError, match="user bob may not change in namespace 'team-a': it needs editor and has no role"):
            bob.cancel(job_id)
        with as_user("carol") as carol:
            assert carol.get(job_id).job_id == job_id
            with pytest.raises(AccessDeniedError, match="needs editor and is viewer there"):
                carol.cancel(job_id)
            with pytest.raises(AccessDeniedError, match="every namespace"):
                carol.create_token("carol-2", 60)
        with as_user("dave") as dave:
            assert dave.whoami().name == "dave"
            admin.revoke_token(issued["dave"].info.token_id)
            with pytest.raises(CredentialsRefusedError, match="was revoked"):
                dave.whoami()
        assert admin.cancel(job_id).job_id == job_id
        trail = [(e.principal, e.method, e.job_id, e.result) for e in admin.audit(job_id)]
        assert trail[0] == ("user local-user", "SubmitJob", job_id, "OK"), trail
        assert ("user mallory", "CancelJob", job_id, "PERMISSION_DENIED") in trail and ("user bob", "CancelJob", job_id, "PERMISSION_DENIED") in trail
        assert trail[-1] == ("user local-user", "CancelJob", job_id, "OK")
        everything = [(e.principal, e.method, e.result) for e in admin.audit()]
        assert ("user local-user", "RevokeToken", "OK") in everything and ("user carol", "CreateToken", "PERMISSION_DENIED") in everything
        for _ in admin.watch(job_id):
            pass
    restarted = restart_service(state, root / "state", "master")
    with PrimusClient(restarted.address("master"), timeout=30, credentials=local) as admin:
        assert [(e.method, e.result) for e in admin.audit(job_id)][-1] == ("CancelJob", "OK"), "the trail is in the master's store"
        assert any(t.token_id == issued["dave"].info.token_id and t.revoked_unix for t in admin.tokens())
    dave_again = PrimusClient(restarted.address("master"), timeout=30, credentials=local.with_client(token=issued["dave"].token))
    with dave_again, pytest.raises(CredentialsRefusedError, match="was revoked"):
        dave_again.whoami()


def test_a_restarted_master_serves_the_same_credentials(secured: tuple[ClusterState, Path]) -> None:
    state, root = _current(secured), secured[1]
    restarted = restart_service(state, root / "state", "master")
    assert restarted.security_env == state.security_env and restarted.client == state.client
    with PrimusClient(restarted.address("master"), timeout=10, credentials=restarted.client_security) as client:
        assert all(job.owner == "local-user" for job in client.list()), "the local user sees its own jobs"
    no_certificate = security.Settings(ca=state.client_security.ca, token=state.client_security.token)
    with PrimusClient(restarted.address("master"), timeout=10, credentials=no_certificate) as client, pytest.raises(CredentialsRefusedError, match="TLS handshake"):
        client.list()


def test_a_context_keeps_its_credentials(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    config = contexts.Config()
    config.set_context("prod", "h:1", credentials={"ca": "/ca.pem", "token": "v1.a.b", "cert": ""})
    config.save(path)
    loaded = contexts.Config.load(path)
    assert loaded.contexts == {"prod": "h:1"} and loaded.credentials == {"prod": {"ca": "/ca.pem", "token": "v1.a.b"}}
    path.write_text("contexts:\n  prod: {master: 'h:1', token: 7}\n")
    with pytest.raises(contexts.ConfigError, match=r"contexts\.prod\.token should be a string, not 7"):
        contexts.Config.load(path)
