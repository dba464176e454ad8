"""The data plane's side of the guard: Flight calls admitted like gRPC ones, and the client's bearer token on each."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pyarrow.flight as flight

from primus.auth.guards import AUTHORIZATION, Guard, RefusedError

log = logging.getLogger(__name__)
FLIGHT_METHOD = "/primus.v1.DataExecutorService/Flight"  # how the data plane's calls are named in refusals and rules


class FlightGuard(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    """Admits each Flight call (DoGet, DoExchange) with the executor's guard; refuses with Flight's own errors."""

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> None:
        values = headers.get(AUTHORIZATION) or [""]
        method = f"{FLIGHT_METHOD}/{info.method.name}"
        try:
            self.guard.admit(method, str(values[0]), (), "")
        except RefusedError as exc:
            log.warning("refused %s: %s: %s", method, exc.code.name, exc.reason)
            if exc.code is grpc.StatusCode.UNAUTHENTICATED:
                raise flight.FlightUnauthenticatedError(exc.reason) from None
            raise flight.FlightUnauthorizedError(exc.reason) from None


class _TokenHeader(flight.ClientMiddleware):  # type: ignore[misc]
    def __init__(self, header: str) -> None:
        super().__init__()
        self._header = header

    def sending_headers(self) -> dict[str, str]:
        return {AUTHORIZATION: self._header}


class FlightToken(flight.ClientMiddlewareFactory):  # type: ignore[misc]
    """Sends a bearer token with every Flight call of a client."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._header = f"Bearer {token}"

    def start_call(self, info: Any) -> _TokenHeader:
        return _TokenHeader(self._header)
