"""A job's log files (one per executor and trainer, under its run folder's logs/), read on from where the reader left off."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TAIL_READ_BYTES = 8 << 20  # a log's first read with a tail looks at most this far back


@dataclass
class LogCursor:
    """Where a reader of one job's logs is: the complete lines it has not had yet, file by file. `only` keeps one
    executor's log; `tail` starts each log at its last that many lines (0: from the beginning)."""

    folder: Path
    only: str = ""
    tail: int = 0
    _offsets: dict[str, int] = field(default_factory=dict)

    def executors(self) -> list[str]:
        """The executors (and trainers) that have a log, by id."""
        return sorted(path.stem for path in self.folder.glob("*.log")) if self.folder.is_dir() else []

    def read(self) -> list[tuple[str, str]]:
        """(executor id, line) of every complete line written since the last read, a log after another."""
        lines: list[tuple[str, str]] = []
        for executor_id in self.executors():
            if self.only and executor_id != self.only:
                continue
            lines += [(executor_id, line) for line in self._read_one(executor_id)]
        return lines

    def _read_one(self, executor_id: str) -> list[str]:
        path = self.folder / f"{executor_id}.log"
        try:
            with path.open("rb") as log:
                size = log.seek(0, 2)
                start = self._offsets.get(executor_id)
                first = start is None
                if start is None or start > size:  # new, or rewritten shorter: from its beginning (or the tail)
                    start = max(0, size - TAIL_READ_BYTES) if self.tail else 0
                log.seek(start)
                data = log.read(size - start)
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for its end
        self._offsets[executor_id] = start + len(complete)
        lines = complete.decode("utf-8", errors="replace").splitlines()
        return lines[-self.tail :] if first and self.tail else lines
