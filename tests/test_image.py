"""The image recipe, checked without a container engine (none runs here): what it copies exists, it builds the arena
into the cache the running image reads, pins the torch the package pins, and runs as the manifests' non-root user."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (instruction, arguments) with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def test_the_build_copies_only_what_exists_and_the_context_lets_it_through() -> None:
    build, final = _stages()
    sources = [source for instruction, args in build if instruction == "COPY" for source in args.split()[:-1]]  # the last is the target
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is not in the repository"
    allowed = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    assert sorted(sources) == sorted(allowed), ".dockerignore lets in exactly what is copied"
    assert ("COPY", "--from=build /opt/primus /opt/primus") in final


def test_the_arena_is_built_into_the_cache_the_running_image_reads() -> None:
    build, final = _stages()
    build_env = " ".join(args for instruction, args in build if instruction == "ENV")
    final_env = " ".join(args for instruction, args in final if instruction == "ENV")
    (cache,) = set(re.findall(r"PRIMUS_NATIVE_CACHE=(\S+)", build_env))
    assert re.findall(r"PRIMUS_NATIVE_CACHE=(\S+)", final_env) == [cache] and cache.startswith("/opt/primus/")
    runs = " ".join(args for instruction, args in build if instruction == "RUN")
    assert "python -m primus.native --strict" in runs, "a failed arena build fails the image build"
    assert not any(instruction == "RUN" and "g++" in args for instruction, args in final), "no compiler in the running image"


def test_torch_is_pinned_as_the_package_pins_it() -> None:
    pinned = re.search(r'"torch==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None
    assert f'"torch=={pinned.group(1)}"' in DOCKERFILE.read_text()


def test_it_runs_as_the_manifests_non_root_user() -> None:
    _, final = _stages()
    (user,) = [args for instruction, args in final if instruction == "USER"]
    uid, gid = (int(part) for part in user.split(":"))
    master = next(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "base" / "master.yaml").read_text()))
    context = master["spec"]["template"]["spec"]["securityContext"]
    assert uid != 0 and (uid, gid) == (context["runAsUser"], context["runAsGroup"])
    assert ("WORKDIR", "/tmp") in final, "the only place it writes without a volume"


def test_make_image_without_a_reachable_engine_says_so_in_one_line(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sed", "sh"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    done = subprocess.run([make, "-s", "image"], cwd=ROOT, env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == "make image: no container engine here (docker or podman); build the Dockerfile where one runs"
