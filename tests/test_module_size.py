"""No hand-written Python module of the repository is over 700 lines (issue 29); generated *_pb2*.py files are exempt."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 700
NOT_SOURCE = {"__pycache__", "build", "dist", "node_modules", "runs"}  # beside hidden folders (.venv, .git, caches)


def hand_written_modules(root: Path) -> list[Path]:
    """Every .py file under root but the generated protobuf modules and what hidden, cache or build folders hold."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and name not in NOT_SOURCE]
        found += [Path(folder) / name for name in files if name.endswith(".py") and "_pb2" not in name]
    return sorted(found)


def over_limit(root: Path, limit: int = LIMIT) -> list[str]:
    """Each hand-written module over `limit` lines, as "path: N lines" relative to root."""
    counted = ((path, len(path.read_text(encoding="utf-8").splitlines())) for path in hand_written_modules(root))
    return [f"{path.relative_to(root)}: {lines} lines" for path, lines in counted if lines > limit]


def test_the_check_names_a_long_module_and_skips_generated_and_hidden_ones(tmp_path: Path) -> None:
    long = "x = 1\n" * (LIMIT + 1)
    for name in ("pkg/long.py", "pkg/v1/master_pb2.py", "pkg/v1/master_pb2_grpc.py", ".venv/lib/site.py", "pkg/__pycache__/long.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(long)
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * LIMIT)
    assert over_limit(tmp_path) == [f"pkg/long.py: {LIMIT + 1} lines"]


def test_no_hand_written_module_is_over_700_lines() -> None:
    modules = hand_written_modules(ROOT)
    assert Path(__file__).resolve() in modules and ROOT / "primus" / "runtime" / "rpc.py" in modules  # the walk reaches the project's code
    over = over_limit(ROOT)
    assert not over, f"hand-written modules over {LIMIT} lines (split them by concern):\n" + "\n".join(over)
