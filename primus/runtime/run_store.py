"""Where run folders live: a local (or shared) folder, or an object store (s3://, gs://, hdfs://) through pyarrow.

A process works in a local folder either way. On a local store that folder is the run folder itself and nothing is
copied. On an object store it is a scratch folder of the process's own (PRIMUS_SCRATCH_DIR, else the system's temporary
folder), and what must outlive the process (checkpoints, reports, logs, traces, quarantined records) is put to the store
by the code that writes it: objects appear whole or not at all, and a set of files counts once the file naming them
(a manifest) is put last. Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_ENDPOINT_URL_S3, ...) or a mounted secret, never from the URI.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from primus.errors import InvalidRequestError, UnavailableError
from primus.spec import OBJECT_STORE_SCHEMES, credentials_in

log = logging.getLogger(__name__)
SCRATCH_ENV = "PRIMUS_SCRATCH_DIR"
CHUNK = 8 << 20


def is_object_uri(location: str) -> bool:
    return location.split("://", 1)[0] in OBJECT_STORE_SCHEMES if "://" in location else False


def scratch_root() -> Path:
    return Path(os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()) / "primus-scratch"


def uri_with_region(uri: str) -> str:
    """An s3:// URI with the environment's region (AWS_REGION, AWS_DEFAULT_REGION) when it names none: pyarrow would
    otherwise ask the store for the bucket's region, one more network call on every open that can fail on its own."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not uri.startswith("s3://") or not region or "region=" in uri:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}region={region}"


@dataclass(frozen=True)
class RunStore:
    """A run folder: `uri` as given (a path or an object store URI) and the local folder this process works in."""

    uri: str
    local: Path
    fs: pafs.FileSystem | None = None  # None: a local folder, `local` is the store
    root: str = ""  # the store's path of the folder (bucket/prefix/...)

    @property
    def remote(self) -> bool:
        return self.fs is not None

    @classmethod
    def open(cls, location: str | Path, scratch: Path | None = None) -> RunStore:
        """A store at location; on an object store, `scratch` (default: a folder of this process under scratch_root())
        is the local working folder."""
        text = str(location)
        if not is_object_uri(text):
            path = Path(text.removeprefix("file://")).resolve()
            return cls(str(path), path)
        if credentials_in(text):
            raise InvalidRequestError(
                f"runs folder {text.split('://', 1)[0]}://...: a URI carries no credentials; set them in the environment (AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY) or a mounted secret"
            )
        try:
            fs, root = pafs.FileSystem.from_uri(uri_with_region(text))
        except (ValueError, OSError) as exc:
            raise UnavailableError(f"runs folder {text}: cannot reach the object store: {exc}") from None
        local = scratch or scratch_root() / f"{os.getpid()}-{os.urandom(3).hex()}" / text.rstrip("/").rsplit("/", 1)[-1]
        return cls(text.rstrip("/"), local, fs, root.rstrip("/"))

    def child(self, name: str) -> RunStore:
        """The store of a folder inside this one (a job's run folder inside the runs folder)."""
        local = self.local / name
        if not self.remote:
            return RunStore(str(local), local)
        return RunStore(f"{self.uri}/{name}", local, self.fs, f"{self.root}/{name}")

    def parent_child(self, name: str) -> RunStore:
        """The store of a sibling folder (the run folder's snapshots beside its checkpoints)."""
        parent = (
            RunStore(self.uri.rsplit("/", 1)[0], self.local.parent, self.fs, self.root.rsplit("/", 1)[0])
            if self.fs
            else RunStore(str(self.local.parent), self.local.parent)
        )
        return parent.child(name)

    def uri_of(self, relative: str) -> str:
        return f"{self.uri}/{relative}" if self.remote else str(self.local / relative)

    # --- objects ----------------------------------------------------------------------------------

    def put(self, relative: str, source_path: Path | None = None) -> None:
        """Copy local/relative (or source_path) to the store at relative (nothing to do on a local store)."""
        if self.fs is None:
            return
        with open(source_path or self.local / relative, "rb") as source, self.fs.open_output_stream(f"{self.root}/{relative}") as out:
            while chunk := source.read(CHUNK):
                out.write(chunk)

    def put_bytes(self, relative: str, data: bytes) -> str:
        """Write data at relative (whole: a local file through a temporary name, an object in one put); where it is."""
        if self.fs is not None:
            with self.fs.open_output_stream(f"{self.root}/{relative}") as out:
                out.write(data)
            return self.uri_of(relative)
        target = self.local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        try:
            tmp.write_bytes(data)
        except OSError:
            tmp.unlink(missing_ok=True)  # half a file holds space and says nothing
            raise
        tmp.replace(target)
        return str(target)

    def get(self, relative: str) -> Path:
        """The local copy of relative, fetched from the store when missing (whole, through a temporary name)."""
        target = self.local / relative
        if self.fs is None or target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        try:
            with self.fs.open_input_stream(f"{self.root}/{relative}") as source, open(tmp, "wb") as out:
                while chunk := source.read(CHUNK):
                    out.write(chunk)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            raise FileNotFoundError(f"{self.uri_of(relative)}: no such object") from None
        tmp.replace(target)
        return target

    def read_bytes(self, relative: str) -> bytes:
        if self.fs is None:
            return (self.local / relative).read_bytes()
        try:
            with self.fs.open_input_stream(f"{self.root}/{relative}") as source:
                return bytes(source.read())
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri_of(relative)}: no such object") from None

    def list(self, folder: str = "") -> list[str]:
        """Names (relative to folder) of the files directly in folder, sorted; [] when it does not exist."""
        if self.fs is None:
            where = self.local / folder
            return sorted(p.name for p in where.iterdir() if p.is_file()) if where.is_dir() else []
        base = f"{self.root}/{folder}".rstrip("/")
        infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=False))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def folders(self) -> builtins.list[str]:
        """Names of the folders directly in this one, sorted."""
        if self.fs is None:
            return sorted(p.name for p in self.local.iterdir() if p.is_dir()) if self.local.is_dir() else []
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True, recursive=False))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def copy_to(self, relative: str, target: RunStore) -> None:
        """Copy relative into target (the same store: on an object store, object to object without passing here)."""
        if self.fs is not None and target.fs is not None:
            self.fs.copy_file(f"{self.root}/{relative}", f"{target.root}/{relative}")
            return
        if self.fs is None and target.fs is None:
            target.local.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.local / relative, target.local / relative)
            return
        target.put_bytes(relative, self.read_bytes(relative))

    def delete_tree(self) -> None:
        """Delete the whole folder: on the store every object under it, and the local copy."""
        if self.fs is not None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_dir(self.root)
        shutil.rmtree(self.local, ignore_errors=True)

    def delete(self, relative: str) -> None:
        """Delete relative in the store (a local store: the local file)."""
        if self.fs is None:
            (self.local / relative).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(f"{self.root}/{relative}")


def read_bytes_at(location: str) -> bytes:
    """The bytes of one file or object, by its path or URI (a report's path, as the master keeps it)."""
    if not is_object_uri(location):
        return Path(location.removeprefix("file://")).read_bytes()
    folder, _, name = location.rpartition("/")
    return RunStore.open(folder).read_bytes(name)


def parent_of(location: str | Path) -> str:
    """The folder (or prefix) a run folder is in: what processes are given as their --runs-dir."""
    text = str(location).rstrip("/")
    return text.rsplit("/", 1)[0] if is_object_uri(text) else str(Path(text).parent)


def local_folder(location: str | Path) -> Path:
    """Where a long-lived service keeps a run folder's files on this host: the folder itself, or on an object store the
    same place under scratch_root() every time (a restarted service finds what it wrote)."""
    text = str(location).rstrip("/")
    if not is_object_uri(text):
        return Path(text.removeprefix("file://"))
    return scratch_root() / "runs" / text.split("://", 1)[1].replace("/", "_")


def fetch_run(uri: str, skip: tuple[str, ...] = ("checkpoints", "snapshots"), into: Path | None = None) -> Path:
    """A run folder on an object store copied to this host (what reading it needs: the report, the traces, the logs;
    not the checkpoints and snapshots), into the same place each time (or into); the local folder. Objects whose size
    changed since are fetched again (a trace file put as it grows)."""
    store = RunStore.open(uri, scratch=into or local_folder(uri))
    assert store.fs is not None
    infos = store.fs.get_file_info(pafs.FileSelector(store.root, allow_not_found=True, recursive=True))
    for info in infos:
        relative = info.path[len(store.root) + 1 :]
        if info.type == pafs.FileType.File and relative.split("/", 1)[0] not in skip:
            target = store.local / relative
            if not target.exists() or target.stat().st_size != info.size:
                target.unlink(missing_ok=True)
                store.get(relative)
    if not store.local.is_dir():
        raise FileNotFoundError(f"{uri}: no run folder there")
    return store.local


class RunsCopy(threading.Thread):
    """Keeps a local copy of a runs folder on an object store current (each job's report, traces and logs), every
    `every_seconds`: what reads run folders from a disk (the explorer) reads runs on a store through it."""

    def __init__(self, uri: str, into: Path, every_seconds: float = 10.0) -> None:
        super().__init__(name="runs-copy", daemon=True)
        self.uri, self.into, self.every_seconds = uri.rstrip("/"), into, every_seconds
        self.copy_once()

    def copy_once(self) -> None:
        into = self.into
        into.mkdir(parents=True, exist_ok=True)
        for job in RunStore.open(self.uri, scratch=into).folders():
            if job != "savepoints":
                try:
                    fetch_run(f"{self.uri}/{job}", into=into / job)
                except OSError as exc:
                    log.warning("run %s/%s not copied: %s", self.uri, job, exc)

    def run(self) -> None:
        while True:
            time.sleep(self.every_seconds)
            try:
                self.copy_once()
            except OSError as exc:
                log.warning("runs at %s not copied this time: %s", self.uri, exc)
