"""What TLS costs: Arrow Flight serving throughput and gRPC call rate, plaintext vs TLS vs mutual TLS (and a token).

The servers run in a child process (a Flight server streaming a table of sample-like columns, and a gRPC server with
the master's API behind primus.runtime.rpc), the client here; the modes take turns, round after round, and each keeps its median. Prints a table,
then one JSON object as the last line.

    PYTHONPATH=. python benchmarks/security.py [--rows 400000] [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from primus.auth import security, tokens
from primus.runtime import rpc
from primus.tools import certs
from primus.v1 import master_pb2, master_pb2_grpc

MODES = ("plaintext", "tls", "mtls", "mtls+token")


def _table(rows: int) -> pa.Table:
    rng = np.random.default_rng(1)
    columns: dict[str, Any] = {f"dense_{i}": rng.random(rows, dtype=np.float32) for i in range(8)}
    columns.update({f"sparse_{i}": rng.integers(0, 1 << 40, rows, dtype=np.int64) for i in range(8)})
    columns["label"] = rng.integers(0, 2, rows, dtype=np.int8)
    return pa.table(columns)


class _Tables(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, location: str, table: pa.Table, **kwargs: Any) -> None:
        super().__init__(location, **kwargs)
        self._table = table

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
        return flight.RecordBatchStream(self._table)


class _Master(master_pb2_grpc.MasterServiceServicer):
    def ListJobs(self, request: master_pb2.ListJobsRequest, context: grpc.ServicerContext) -> master_pb2.ListJobsResponse:
        return master_pb2.ListJobsResponse()


def _serve(settings: security.Settings, rows: int, pipe: Connection) -> None:
    """The child: both servers with these settings; sends their addresses, serves until told to stop."""
    os.environ.update(settings.env())
    table = _table(rows)
    server = _Tables(security.flight_location("127.0.0.1:0", settings), table, **security.flight_server_kwargs(settings))
    running = rpc.start_server(
        "master", "127.0.0.1:0", [lambda s: master_pb2_grpc.add_MasterServiceServicer_to_server(_Master(), s)], ["primus.v1.MasterService"], credentials=settings
    )
    pipe.send((f"127.0.0.1:{server.port}", running.address, table.nbytes))
    pipe.recv()
    running.stop(0)
    server.shutdown()


class _Peer:
    """One mode's servers in a child process, and this process's clients of them."""

    def __init__(self, settings: security.Settings, client: security.Settings, rows: int) -> None:
        self.pipe, child = mp.Pipe()
        self.process = mp.get_context("spawn").Process(target=_serve, args=(settings, rows, child))
        self.process.start()
        self.flight_address, self.grpc_address, self.nbytes = self.pipe.recv()
        self.client, self.rows = client, rows
        self.reader = security.flight_connect(self.flight_address, client)
        assert self.reader.do_get(flight.Ticket(b"t")).read_all().num_rows == rows  # warm: connection and handshake
        self.stub = master_pb2_grpc.MasterServiceStub(rpc.connect(self.grpc_address, credentials=client))
        self.stub.ListJobs(master_pb2.ListJobsRequest(), timeout=10)
        self.flight_seconds: list[float] = []
        self.call_seconds: list[float] = []
        self.connect_seconds: list[float] = []

    def round(self, calls: int) -> None:
        start = time.perf_counter()
        assert self.reader.do_get(flight.Ticket(b"t")).read_all().num_rows == self.rows
        self.flight_seconds.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(calls):
            self.stub.ListJobs(master_pb2.ListJobsRequest(), timeout=10)
        self.call_seconds.append(time.perf_counter() - start)
        for _ in range(5):  # a fresh channel each time: the handshake's cost
            start = time.perf_counter()
            channel = rpc.connect(self.grpc_address, credentials=self.client)
            master_pb2_grpc.MasterServiceStub(channel).ListJobs(master_pb2.ListJobsRequest(), timeout=10)
            self.connect_seconds.append(time.perf_counter() - start)
            channel.close()

    def result(self, calls: int) -> dict[str, float]:
        flight_median = statistics.median(self.flight_seconds)
        return {
            "flight_mb_per_s": round(self.nbytes / flight_median / 1e6, 1),
            "flight_rows_per_s": round(self.rows / flight_median),
            "grpc_calls_per_s": round(calls / statistics.median(self.call_seconds)),
            "first_call_ms": round(statistics.median(self.connect_seconds) * 1000, 2),
        }

    def close(self) -> None:
        self.reader.close()
        self.pipe.send("stop")
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="rows of the table each Flight read streams")
    parser.add_argument("--calls", type=int, default=2000, help="unary calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="primus-security-bench-"))
    ca = certs.create_ca(directory)
    service = certs.issue(ca, directory, "service")
    client_cert = certs.issue(ca, directory, "client", hosts=[], server=False)
    secret_file = directory / "token.secret"
    secret_file.write_bytes(tokens.new_secret())
    token = tokens.create_token(tokens.read_secret(str(secret_file)), "bench", 3600)
    tls = security.Settings(str(ca.cert), str(service.cert), str(service.key))
    mtls = security.Settings(str(ca.cert), str(service.cert), str(service.key), mtls=True)
    pairs = {
        "plaintext": (security.Settings(), security.Settings()),
        "tls": (tls, security.Settings(ca=str(ca.cert))),
        "mtls": (mtls, security.Settings(str(ca.cert), str(client_cert.cert), str(client_cert.key))),
        "mtls+token": (
            security.Settings(mtls.ca, mtls.cert, mtls.key, True, token_secret_file=str(secret_file)),
            security.Settings(str(ca.cert), str(client_cert.cert), str(client_cert.key), token=token),
        ),
    }
    load_before = os.getloadavg()[0]
    peers = {mode: _Peer(server, client, options.rows) for mode, (server, client) in pairs.items()}
    try:
        for _ in range(options.rounds):  # modes interleaved, so that a load that comes and goes falls on each alike
            for peer in peers.values():
                peer.round(options.calls)
        results = {mode: peer.result(options.calls) for mode, peer in peers.items()}
    finally:
        for peer in peers.values():
            peer.close()
    plain = results["plaintext"]
    print(f"{'mode':<12} {'Flight MB/s':>12} {'Flight rows/s':>14} {'vs plain':>9} {'gRPC calls/s':>13} {'vs plain':>9} {'new channel ms':>15}")
    for mode, r in results.items():
        print(
            f"{mode:<12} {r['flight_mb_per_s']:>12.1f} {r['flight_rows_per_s']:>14,} {r['flight_mb_per_s'] / plain['flight_mb_per_s']:>9.2f}"
            f" {r['grpc_calls_per_s']:>13,} {r['grpc_calls_per_s'] / plain['grpc_calls_per_s']:>9.2f} {r['first_call_ms']:>15.2f}"
        )
    summary = {
        "rows": options.rows,
        "calls": options.calls,
        "rounds": options.rounds,
        "modes": results,
        "flight_tls_vs_plain": round(results["tls"]["flight_mb_per_s"] / plain["flight_mb_per_s"], 3),
        "grpc_tls_vs_plain": round(results["tls"]["grpc_calls_per_s"] / plain["grpc_calls_per_s"], 3),
        "grpc_mtls_token_vs_plain": round(results["mtls+token"]["grpc_calls_per_s"] / plain["grpc_calls_per_s"], 3),
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
