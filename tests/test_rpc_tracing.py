"""The server spans of a real gRPC server: every call traced, except the hot methods, one call in N, served the same."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from primus.auth import security, tokens
from primus.errors import NotFoundError
from primus.runtime import rpc, telemetry
from primus.v1 import planner_pb2, planner_pb2_grpc

LEASE, DROP = "/primus.v1.PlannerService/LeaseTask", "/primus.v1.PlannerService/DropPlan"
SECRET = tokens.new_secret()


class _Planner(planner_pb2_grpc.PlannerServiceServicer):
    def LeaseTask(self, request: planner_pb2.LeaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.LeaseTaskResponse:
        if request.job_id == "gone":
            raise NotFoundError("no plan for job gone")
        if request.job_id == "broken":
            raise ValueError("a fault in the handler")
        return planner_pb2.LeaseTaskResponse(retry_after_seconds=0.5)

    def DropPlan(self, request: planner_pb2.DropPlanRequest, context: grpc.ServicerContext) -> planner_pb2.DropPlanResponse:
        return planner_pb2.DropPlanResponse()


@pytest.fixture()
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The spans the servers started in the test end, kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "tracer", lambda name="primus": provider.get_tracer(name))
    yield exporter
    provider.shutdown()


def _planner(settings: security.Settings | None = None) -> rpc.RunningServer:
    register = [lambda server: planner_pb2_grpc.add_PlannerServiceServicer_to_server(_Planner(), server)]
    return rpc.start_server("planner", "127.0.0.1:0", register, ["primus.v1.PlannerService"], credentials=settings)


def test_one_call_of_a_hot_method_in_n_is_traced_and_every_call_is_answered_the_same(spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rpc.HOT_TRACE_ENV, "3")
    running = _planner()
    try:
        stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(running.address))
        answers = [stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-a", executor_id="e"), timeout=10).retry_after_seconds for _ in range(7)]
        for _ in range(2):
            stub.DropPlan(planner_pb2.DropPlanRequest(job_id="job-a"), timeout=10)
        codes = []
        for _ in range(3):  # the third hot call after the seven: traced, the other two not
            with pytest.raises(grpc.RpcError) as failed:
                stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="gone", executor_id="e"), timeout=10)
            codes.append((failed.value.code(), failed.value.details()))
    finally:
        running.stop(0)
    assert answers == [0.5] * 7
    assert codes == [(grpc.StatusCode.NOT_FOUND, "no plan for job gone")] * 3, "a domain error is the same status traced or not"
    names = Counter(span.name for span in spans.get_finished_spans())
    assert names[LEASE] == 4, "calls 0, 3, 6 and 9 of the hot method"
    assert names[DROP] == 2, "every call of any other method"


def test_an_untraced_hot_call_is_still_authenticated_and_authorised(spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(rpc.HOT_TRACE_ENV, "1000")
    secret_file = tmp_path / "token.secret"
    secret_file.write_bytes(SECRET)
    running = _planner(security.Settings(token_secret_file=str(secret_file)))

    def lease(token: str, job_id: str) -> grpc.StatusCode:
        channel = rpc.connect(running.address, credentials=security.Settings(token=token))
        try:
            planner_pb2_grpc.PlannerServiceStub(channel).LeaseTask(planner_pb2.LeaseTaskRequest(job_id=job_id, executor_id="e"), timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        finally:
            channel.close()

    try:
        first = lease(tokens.job_token(SECRET, "job-a"), "job-a")  # the one call traced
        refused = [lease(tokens.job_token(SECRET, "job-a"), "job-b"), lease("", "job-a")]
        allowed = lease(tokens.job_token(SECRET, "job-b"), "job-b")
    finally:
        running.stop(0)
    assert first is grpc.StatusCode.OK and allowed is grpc.StatusCode.OK
    assert refused == [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED]
    assert Counter(span.name for span in spans.get_finished_spans())[LEASE] == 1


def test_a_bad_setting_is_said_and_the_default_kept(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(rpc.HOT_TRACE_ENV, "0")
    assert rpc.hot_trace_one_in() == rpc.HOT_TRACE_ONE_IN
    assert "PRIMUS_TRACE_HOT_ONE_IN='0' is not a whole number of calls from 1" in caplog.text
    monkeypatch.setenv(rpc.HOT_TRACE_ENV, " 1 ")
    assert rpc.hot_trace_one_in() == 1
    monkeypatch.delenv(rpc.HOT_TRACE_ENV)
    assert rpc.hot_trace_one_in() == rpc.HOT_TRACE_ONE_IN


def test_a_refusal_sets_the_spans_status_without_a_stack_and_a_fault_records_its_exception(spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rpc.HOT_TRACE_ENV, "1")
    running = _planner()
    try:
        stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(running.address))
        codes = []
        for job_id in ("gone", "broken"):
            with pytest.raises(grpc.RpcError) as failed:
                stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id=job_id, executor_id="e"), timeout=10)
            codes.append(failed.value.code())
    finally:
        running.stop(0)
    assert codes == [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNKNOWN]
    refused, fault = spans.get_finished_spans()
    assert refused.status.status_code is StatusCode.ERROR and refused.status.description == "no plan for job gone"
    assert refused.attributes is not None and refused.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert not refused.events, "a refusal formats no stack"
    assert fault.status.status_code is StatusCode.ERROR and fault.status.description == "ValueError: a fault in the handler"
    (event,) = fault.events
    assert event.name == "exception" and event.attributes is not None and "a fault in the handler" in str(event.attributes["exception.stacktrace"])
