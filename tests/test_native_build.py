"""primus._arena is built on first use: into a per-user cache keyed by pyarrow and the sources, once for concurrent
first users, again when a source changes, never retried by loaders after a failed compile, and with one warning and
the copying fallback where there is no compiler. A plain `pip install` (no `make native`) gets it the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pyarrow
import pytest

from primus import native
from tests.tiers import Tier, uses

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_ENV = "PRIMUS_REQUIRE_NATIVE"
LOAD = "from primus import native; module = native.load(); print(module.__file__ if module else 'none')"

if shutil.which("g++") is None:
    if os.environ.get(REQUIRE_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_ENV}=1 but there is no g++ to build primus._arena with")
    pytest.skip("no g++: primus._arena cannot be built here", allow_module_level=True)


@uses(Tier.SLOW)
def _counting_compiler(folder: Path) -> tuple[Path, Path]:
    """A $CXX that notes each call in a file, then runs g++: how many compiles a build took."""
    calls = folder / "compiler-calls"
    wrapper = folder / "counting-g++"
    wrapper.write_text(f'#!/bin/sh\necho call >> "{calls}"\nexec {shutil.which("g++")} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, calls


def _calls(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@uses(Tier.SLOW)
def _env(cache: Path, cxx: str) -> dict[str, str]:
    return {**os.environ, native.CACHE_ENV: str(cache), "CXX": cxx}


@pytest.fixture(scope="module")
def first_use(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path, list[str]]]:
    """Two processes load the extension at once from an empty cache: (cache, $CXX, its call count file, what each printed)."""
    folder = tmp_path_factory.mktemp("native")
    cache = folder / "cache"
    wrapper, calls = _counting_compiler(folder)
    racers = [subprocess.Popen([sys.executable, "-c", LOAD], env=_env(cache, str(wrapper)), stdout=subprocess.PIPE, text=True) for _ in range(2)]
    printed = [racer.communicate(timeout=600)[0].strip() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    yield cache, wrapper, calls, printed


def test_concurrent_first_users_compile_once_into_the_cache(first_use: tuple[Path, Path, Path, list[str]]) -> None:
    cache, _, calls, printed = first_use
    assert printed[0] == printed[1] != "none", "both processes load the one build"
    built = Path(printed[0])
    assert built.parent.parent == cache and built.parent.name.startswith(f"{pyarrow.__version__}-"), "<cache>/<pyarrow version>-<hash>/"
    assert _calls(calls) == 1, "the lock makes the second process wait for the first one's build and use it"
    assert (cache / f"{built.parent.name}.lock").exists()
    assert json.loads((built.parent / "inputs.json").read_text())["source_digest"] == native.source_digest()


def test_unchanged_sources_are_not_compiled_again_and_changed_ones_are(
    first_use: tuple[Path, Path, Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, wrapper, calls, printed = first_use
    monkeypatch.setenv("CXX", str(wrapper))
    sources = tmp_path / "sources"
    shutil.copytree(native.SOURCES, sources, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    before = _calls(calls)
    assert native.build(sources, cache) == Path(printed[0]) and _calls(calls) == before, "the same sources: the cached build, no compile"
    with (sources / "arena.pyx").open("a") as pyx:
        pyx.write("\n\ndef probe():\n    return 42\n")
    changed = native.build(sources, cache)
    assert changed.parent != Path(printed[0]).parent and _calls(calls) == before + 1, "an edited source is another entry, compiled once"
    assert native.build(sources, cache) == changed and _calls(calls) == before + 1
    probe = f"from pathlib import Path; from primus import native; print(native.load_module(Path({str(changed)!r})).probe())"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "42", "the new build is the edited source"


def test_a_failed_compile_is_not_retried_by_loaders_until_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper, calls = _counting_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(wrapper))
    sources = tmp_path / "sources"
    shutil.copytree(native.SOURCES, sources, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    pyx = sources / "arena.pyx"  # an include ahead of arrow's headers that is not there: g++ fails in its first second
    text = pyx.read_text()
    after_directives = text.index('"""')
    pyx.write_text(text[:after_directives] + 'cdef extern from "broken_on_purpose.h":\n    pass\n' + text[after_directives:])
    cache = tmp_path / "cache"
    with pytest.raises(native.BuildError, match=r"counting-g\+\+ failed: .*broken_on_purpose\.h") as failure:
        native.build(sources, cache)
    failed_log = native.extension_path(native.build_inputs(sources), cache).parent / native.FAILED_LOG
    assert str(failed_log) in str(failure.value) and "broken_on_purpose.h" in failed_log.read_text()
    assert _calls(calls) == 1
    with pytest.raises(native.BuildError, match="an earlier build failed"):
        native.build(sources, cache)
    assert _calls(calls) == 1, "a loader does not compile again: one failed attempt, not one per process"
    with pytest.raises(native.BuildError, match=r"broken_on_purpose\.h"):
        native.build(sources, cache, retry=True)
    assert _calls(calls) == 2, "make native (retry) does"


def test_without_a_compiler_the_arena_is_off_with_one_warning(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import logging, sys
        from pathlib import Path
        logging.basicConfig(level=logging.WARNING)
        from primus.datapath import arena
        assert arena.extension() is None and arena.native is None
        print(arena.activate(Path(sys.argv[1]), 1 << 20))
        """
    )
    cache, shm = tmp_path / "cache", Path("/dev/shm") / f"primus-test-nocxx-{os.getpid()}"
    done = subprocess.run([sys.executable, "-c", script, str(shm)], env=_env(cache, "/nonexistent"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None", "no extension: no arena, executors copy"
    warnings = [line for line in done.stderr.splitlines() if "primus._arena not built" in line]
    assert len(warnings) == 1, done.stderr
    assert "no C++ compiler: /nonexistent not found" in warnings[0] and native.FALLBACK in warnings[0]
    assert not list(cache.rglob("_arena*")) and not list(cache.rglob(native.FAILED_LOG)), "nothing built, nothing marked failed: a compiler installed later is used"
    assert not shm.exists()


def test_a_cache_that_cannot_be_written_is_a_build_error() -> None:
    with pytest.raises(native.BuildError, match=f"cannot write the cache .*set {native.CACHE_ENV}"):
        native.build(cache=Path("/proc/primus-native-cache"))


PIP_CHECK = """
import json, os, sys
from pathlib import Path
import pyarrow as pa
import pyarrow.parquet as pq
import primus
from primus.datapath import arena
shm = Path("/dev/shm") / f"primus-test-pip-{os.getpid()}"
active = arena.activate(shm, 16 << 20)
pq.write_table(pa.table({"click": pa.array([0, 1, 1], pa.int8()), "x": pa.array([1.5, 2.5, 3.5], pa.float32())}), sys.argv[1])
with arena.checking(["click", "x"]) as checked, pa.OSFile(sys.argv[1]) as handle:
    table = arena.read_columns(handle, [], ["click", "x"])
print(json.dumps({
    "primus": primus.__file__,
    "extension": arena.native.__file__ if arena.native else None,
    "active": active is not None,
    "in_arena": table is not None and active.layout(table.combine_chunks().to_batches()[0]) is not None,
    "checked": [checked.binary(table.column("click").chunk(0)), checked.finite(table.column("x").chunk(0))] if table is not None else None,
    "sources": sorted(p.name for p in Path(primus.__file__).parent.joinpath("native").iterdir() if p.suffix in (".pyx", ".h")),
}))
"""


@pytest.mark.timeout(900)
def test_a_plain_pip_install_decodes_into_shared_memory(tmp_path: Path) -> None:
    """A fresh venv, `pip install` of this tree (not editable, no `make native`; its dependencies those installed
    here): the first use builds the extension."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "primus", "services"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # The dependencies (torch, pyarrow, Cython, setuptools, pip itself) are the ones installed here, seen through a .pth
    # file after the new environment's own site-packages: what is tested is the package built from this tree, not a
    # download of its dependencies.
    (site,) = (venv / "lib").glob("python*/site-packages")
    (site / "installed-here.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "--no-index", str(source)],
        capture_output=True,
        text=True,
        timeout=780,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in _env(tmp_path / "cache", "").items() if k not in ("PYTHONPATH", "CXX")}
    done = subprocess.run([python, "-c", PIP_CHECK, str(tmp_path / "small.parquet")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["primus"].startswith(str(venv)), "the installed package, not this checkout"
    assert seen["sources"] == sorted(native.SOURCE_FILES), "the wheel carries the extension's sources"
    assert seen["extension"] is not None and seen["extension"].startswith(str(tmp_path / "cache")), "built on first use into the cache"
    assert seen["active"] and seen["in_arena"], "the executor's fast path: decoded straight into shared memory"
    assert seen["checked"] == [True, True], "and checked while decoding"
