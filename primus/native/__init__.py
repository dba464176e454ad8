"""Build primus._arena on first use: Cython and the C++ compiler turn arena.pyx (beside this file, with the headers it
includes) into an extension against this process's pyarrow, once per pyarrow build and source, into a per-user cache
that every process shares.

The extension links pyarrow's C++ libraries, whose ABI changes with each release, so it is compiled against the
pyarrow that will load it, never in a package build's isolated environment (which may hold another pyarrow). The cache
key is the pyarrow version and a hash of the sources, the pyarrow installation, numpy and the Python ABI: an upgrade or
an edited source builds anew. A file lock makes concurrent first users compile once. Without a compiler (or Cython)
the build fails with one warning and Primus still works: executors copy batches into shared memory instead, and
hash_bucket computes strings' CRC-32 in numpy (primus/datapath/hashing.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

MODULE = "primus._arena"
SOURCES = Path(__file__).resolve().parent
SOURCE_FILES = ("arena.pyx", "arena_pool.h", "crc32_strings.h")
CACHE_ENV = "PRIMUS_NATIVE_CACHE"  # where the builds go; default $XDG_CACHE_HOME/primus/native, else ~/.cache/primus/native
FAILED_LOG = "failed.log"  # a failed compile leaves its output here; loaders do not retry it, `make native` does
BUILD_LOG = "build.log"
CXX_FLAGS = ("-std=c++20", "-O2", "-fPIC", "-fwrapv", "-fno-strict-aliasing", "-DNDEBUG", "-pthread", "-Wno-unused-function", "-Wno-unused-variable")
COMPILE_TIMEOUT_SECONDS = 600
FALLBACK = "executors will copy batches into shared memory, and hash_bucket hash strings in numpy, instead"
log = logging.getLogger(__name__)
_load_lock = threading.Lock()
_loaded: tuple[ModuleType | None] | None = None  # (the module or None) once load() has run in this process


class BuildError(Exception):
    """The extension could not be built; the message says why, and where the compiler's output is."""


@dataclass(frozen=True)
class BuildInputs:
    """Everything the compiled extension depends on: a change to any of them is another cache entry."""

    pyarrow_version: str
    pyarrow_dir: str  # two installations of one version are two entries: each links its own libraries
    numpy_version: str
    python_abi: str  # the extension suffix, e.g. .cpython-311-x86_64-linux-gnu.so
    source_digest: str

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.pyarrow_version}-{digest}"


def source_digest(sources: Path = SOURCES) -> str:
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0" + (sources / name).read_bytes() + b"\0")
    return digest.hexdigest()


def build_inputs(sources: Path = SOURCES) -> BuildInputs:
    import numpy
    import pyarrow

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    pyarrow_dir = str(Path(pyarrow.__file__).resolve().parent)
    return BuildInputs(pyarrow.__version__, pyarrow_dir, numpy.__version__, suffix, source_digest(sources))


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "primus" / "native"


def extension_path(inputs: BuildInputs, cache: Path | None = None) -> Path:
    """Where the extension for these inputs lies once built."""
    return (cache or cache_root()) / inputs.key / f"_arena{inputs.python_abi}"


def compiler() -> list[str]:
    """The C++ compiler's command: $CXX, else the one Python was built with, else c++; BuildError when it is not there."""
    command = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    if not command or shutil.which(command[0]) is None:
        raise BuildError(f"no C++ compiler: {command[0] if command else '(empty $CXX)'} not found (set CXX, or install g++)")
    return command


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (made if missing), held by this process until the block ends, or it dies."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(sources: Path = SOURCES, cache: Path | None = None, retry: bool = False, rebuild: bool = False) -> Path:
    """The extension for this process's pyarrow, compiled into the cache unless it is there already; returns its path.

    retry: compile again although the last attempt failed (loaders do not, so a broken build costs one attempt, not one
    per process). rebuild: compile again although it is built. BuildError when it cannot be built."""
    inputs = build_inputs(sources)
    target = extension_path(inputs, cache)
    if target.exists() and not rebuild:
        return target
    entry = target.parent
    try:
        entry.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot write the cache {entry.parent} ({exc.strerror}); set {CACHE_ENV} to a writable folder") from None
    with _locked(entry.parent / f"{inputs.key}.lock"):
        if target.exists() and not rebuild:  # another process built it while this one waited
            return target
        failed = entry / FAILED_LOG
        if failed.exists() and not (retry or rebuild):
            raise BuildError(f"an earlier build failed (its output: {failed}); `make native` or `python -m primus.native` tries again")
        command = compiler()
        if importlib.util.find_spec("Cython") is None:
            raise BuildError("Cython is not installed (pip install cython)")
        log.info("compiling %s for pyarrow %s into %s (once)", MODULE, inputs.pyarrow_version, entry)
        with tempfile.TemporaryDirectory(prefix="build-", dir=entry) as scratch:
            built = _compile(sources, Path(scratch), inputs, command, entry / BUILD_LOG)
            os.replace(built, target)  # whole or not at all: a reader never sees a half-written file
        failed.unlink(missing_ok=True)
        (entry / "inputs.json").write_text(json.dumps(asdict(inputs), indent=2) + "\n")
    return target


def _compile(sources: Path, scratch: Path, inputs: BuildInputs, command: list[str], log_path: Path) -> Path:
    """Cython to C++, then one compiler call that compiles and links; BuildError (output kept in failed.log) on failure."""
    import numpy
    import pyarrow

    cpp, output = scratch / "arena.cpp", scratch / f"_arena{inputs.python_abi}"
    cython = [sys.executable, "-m", "cython", "-3", "--cplus", "--module-name", MODULE, "-o", str(cpp), str(sources / "arena.pyx")]
    libraries = [_library_file(name) for name in ("arrow", "arrow_python", "parquet")]
    rpaths = [f"-Wl,-rpath,{d}" for d in pyarrow.get_library_dirs()]  # found at run time without LD_LIBRARY_PATH
    includes = [f"-I{d}" for d in (sysconfig.get_paths()["include"], pyarrow.get_include(), numpy.get_include(), str(sources))]
    compile_link = [*command, *CXX_FLAGS, "-shared", *includes, str(cpp), "-o", str(output), *libraries, *rpaths]
    transcript: list[str] = []
    for step in (cython, compile_link):
        transcript.append("$ " + shlex.join(step))
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            done = subprocess.CompletedProcess(step, 1, "", str(exc))
        transcript += [done.stdout, done.stderr]
        log_path.write_text("\n".join(transcript))
        if done.returncode != 0:
            failed = log_path.with_name(FAILED_LOG)
            failed.write_text("\n".join(transcript))
            lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
            first_error = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else f"exit code {done.returncode}")
            raise BuildError(f"{Path(step[0]).name if step is compile_link else 'cython'} failed: {first_error} (output: {failed})")
    return output


def _library_file(name: str) -> str:
    """pyarrow's shared library `name` by its file: its wheels ship only versioned names (libarrow.so.2600), which -l does not find."""
    import pyarrow

    for folder in map(Path, pyarrow.get_library_dirs()):
        candidates = sorted(folder.glob(f"lib{name}.so*"), key=lambda p: len(p.name))
        if candidates:
            return str(candidates[0])
    raise BuildError(f"pyarrow's lib{name}.so is not in {pyarrow.get_library_dirs()}")


def load_module(path: Path) -> ModuleType:
    """Import the built extension from `path` as primus._arena."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE] = module
    import primus

    setattr(primus, "_arena", module)  # noqa: B010 - a submodule found outside the package's folder
    return module


def load() -> ModuleType | None:
    """primus._arena, built first where it is not yet (this can take a minute, once); None, with one warning per
    process, where it cannot be built or loaded."""
    global _loaded
    if _loaded is not None:  # asked per batch by consumers: no lock once it is settled
        return _loaded[0]
    with _load_lock:
        if _loaded is None:
            try:
                _loaded = (load_module(build()),)
            except (BuildError, ImportError, OSError) as exc:
                log.warning("primus._arena not built (%s); %s", exc, FALLBACK)
                _loaded = (None,)
        return _loaded[0]
