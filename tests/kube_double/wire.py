"""The Kubernetes double's HTTP side: JSON answers with warnings, chunked watch streams, Status bodies, the requests seen."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kube_double.server import KubeApiDouble

Json = dict[str, Any]


def stamp() -> str:
    """Now, as the API server writes a timestamp."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: Json | None = None) -> Json:
    """A failure as a meta/v1 Status object."""
    body: Json = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


@dataclass
class Request:
    """A request the double saw (`KubeApiDouble.calls`)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class Answer:
    """An answer to send: status code, JSON body, Warning headers."""

    code: int
    body: Json
    warnings: tuple[str, ...] = ()


class Handler(BaseHTTPRequestHandler):
    """One request to the double: read by its `handle`, answered as JSON, raw bytes or a chunked stream."""

    protocol_version = "HTTP/1.1"
    double: KubeApiDouble

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.double.handle(self, "GET")

    def do_POST(self) -> None:
        self.double.handle(self, "POST")

    def do_DELETE(self) -> None:
        self.double.handle(self, "DELETE")

    def do_PUT(self) -> None:
        self.double.handle(self, "PUT")

    def do_PATCH(self) -> None:
        self.double.handle(self, "PATCH")

    def send_json(self, code: int, obj: Json) -> None:
        self.send_bytes(code, json.dumps(obj).encode(), "application/json")

    def send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, event: Json) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def reply(h: Handler, answer: Answer) -> None:
    """An Answer as JSON, with its warnings as Warning headers."""
    data = json.dumps(answer.body).encode()
    h.send_response(answer.code)
    h.send_header("Content-Type", "application/json")
    for warning in answer.warnings:
        h.send_header("Warning", '299 - "' + warning.replace("\\", "\\\\").replace('"', '\\"') + '"')
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
