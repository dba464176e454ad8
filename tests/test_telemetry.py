"""The OTLP/JSON span files: what the exporter writes is valid JSON with every field and value as OTLP encodes it."""

from __future__ import annotations

import enum
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from primus.runtime.telemetry import JOB_KEY, OtlpJsonFileExporter


class Level(enum.IntEnum):
    HIGH = 3


def test_exported_spans_are_otlp_json(tmp_path: Path) -> None:
    resource = Resource.create({"service.name": "data_executor", "process.pid": 12})
    exporter = OtlpJsonFileExporter(tmp_path, "data_executor", resource)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    attributes = {
        JOB_KEY: "job-1",
        "text": 'a "quoted"\\ line\nwith ünïcode',
        "count": 7,
        "big": 2**62,
        "ratio": 0.25,
        "nan": math.nan,
        "inf": -math.inf,
        "flag": False,
        "level": Level.HIGH,
        "names": ["a", "b"],
        "numbers": (1, 2),
    }
    with (
        tracer.start_as_current_span("outer", attributes={JOB_KEY: "job-1"}) as outer,
        tracer.start_as_current_span("data_task.read", attributes=attributes, kind=trace.SpanKind.SERVER) as span,
    ):
        span.add_event("retry", {"primus.attempt": 1})
        span.set_status(trace.Status(trace.StatusCode.ERROR, 'bad "input"'))
    provider.shutdown()

    lines = exporter.path_for("job-1").read_text().splitlines()
    spans = [s for line in lines for r in json.loads(line)["resourceSpans"] for scope in r["scopeSpans"] for s in scope["spans"]]
    resource_attributes = json.loads(lines[0])["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "process.pid", "value": {"intValue": "12"}} in resource_attributes
    read = next(s for s in spans if s["name"] == "data_task.read")
    context = span.get_span_context()
    assert read["traceId"] == f"{context.trace_id:032x}" and read["spanId"] == f"{context.span_id:016x}"
    assert read["parentSpanId"] == f"{outer.get_span_context().span_id:016x}"
    assert read["kind"] == 2  # OTLP's SPAN_KIND_SERVER
    assert int(read["endTimeUnixNano"]) >= int(read["startTimeUnixNano"]) > 0
    values = {a["key"]: a["value"] for a in read["attributes"]}
    assert values["text"] == {"stringValue": attributes["text"]}
    assert values["count"] == {"intValue": "7"} and values["big"] == {"intValue": str(2**62)}
    assert values["ratio"] == {"doubleValue": 0.25}
    assert math.isnan(values["nan"]["doubleValue"]) and values["inf"] == {"doubleValue": -math.inf}
    assert values["flag"] == {"boolValue": False}
    assert values["level"] == {"intValue": "3"}
    assert values["names"] == {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}}
    assert values["numbers"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}
    assert read["events"] == [{"timeUnixNano": read["events"][0]["timeUnixNano"], "name": "retry", "attributes": [{"key": "primus.attempt", "value": {"intValue": "1"}}]}]
    assert read["status"] == {"code": 2, "message": 'bad "input"'}
    assert "parentSpanId" not in next(s for s in spans if s["name"] == "outer")


def test_a_jobs_trace_folder_is_made_once_and_again_once_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resource = Resource.create({"service.name": "planner"})
    exporter = OtlpJsonFileExporter(tmp_path, "planner", resource)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    made: list[Path] = []
    mkdir = Path.mkdir

    def counted(path: Path, *args: Any, **kwargs: Any) -> None:
        if path.name == "traces" and kwargs.get("parents"):  # the exporter's call, not pathlib's own for the folders above and again
            made.append(path)
        mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", counted)

    def spans(job: str, count: int) -> None:
        for index in range(count):
            with tracer.start_as_current_span(f"call-{index}", attributes={JOB_KEY: job}):
                pass

    spans("job-1", 3)
    spans("job-2", 2)
    assert made == [exporter.path_for("job-1").parent, exporter.path_for("job-2").parent], "each job's folder made once"
    shutil.rmtree(tmp_path / "job-1")  # its run folder deleted while the service runs
    spans("job-1", 2)
    assert made[-1] == exporter.path_for("job-1").parent and len(made) == 3
    provider.shutdown()
    assert len(exporter.path_for("job-1").read_text().splitlines()) == 2, "the spans after the removal are kept"
    assert len(exporter.path_for("job-2").read_text().splitlines()) == 2
