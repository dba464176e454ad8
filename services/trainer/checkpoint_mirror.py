"""The checkpoints folder's copy in a run folder on an object store: what a trainer on any host resumes from.

A checkpoint's files are put first and its summary (ckpt-N.json, the commit) last, so the store holds a checkpoint
exactly when it holds its summary: a store without rename commits by a manifest written last. The trainer pushes each
checkpoint before the planner hears of its progress, so progress the planner counts is always in the store; a trainer
starting on a host without the folder pulls the newest committed checkpoint before it resumes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from primus.runtime.run_store import RunStore
from services.trainer import checkpoint as ckpt

log = logging.getLogger(__name__)
UNFINISHED = (".tmp", ".part")


def _summary_name(seq: int) -> str:
    return ckpt.summary_path(Path(ckpt.file_name(seq))).name


class CheckpointMirror:
    """The store of a checkpoints folder (RunStore.child("checkpoints")): push, prune like the folder, pull."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._held = set(store.list())  # what the store holds, as listed once and changed by this mirror since
        self._synced: set[str] = set()  # what the store holds as this folder does: put or pulled by this mirror

    @property
    def folder(self) -> Path:
        return self.store.local

    def push(self, seq: int, files: list[str]) -> None:
        """Put the checkpoint's files the store does not hold as this folder does, then its summary: from then on it
        counts in the store. A file of the same name left by a trainer that died before its summary is put over."""
        for name in files:
            if name not in self._synced:
                self.store.put(name)
                self._held.add(name)
                self._synced.add(name)
        summary = _summary_name(seq)
        self.store.put(summary)
        self._held.add(summary)

    def prune(self) -> None:
        """Delete from the store what the folder no longer holds: summaries first, so no summary outlives its files."""
        local = {p.name for p in self.folder.iterdir() if p.is_file() and not p.name.endswith(UNFINISHED)}
        gone = sorted(self._held - local, key=lambda name: (not name.endswith(".json"), name))
        for name in gone:
            self.store.delete(name)
            self._held.discard(name)
            self._synced.discard(name)

    def pull(self) -> int | None:
        """Fetch the store's newest committed checkpoint into the folder when the folder has none as new: each file
        whole, the summary last; its seq, or None when nothing was fetched."""
        held = set(self.store.list())
        self._held = held
        local = ckpt.committed(self.folder) if self.folder.is_dir() else []
        newest_here = local[-1][0] if local else -1
        for summary in sorted((n for n in held if n.startswith("ckpt-") and n.endswith(".json")), reverse=True):
            try:
                data = json.loads(self.store.read_bytes(summary))
                seq, files = int(data["seq"]), [str(f) for f in data["files"]]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("checkpoint summary %s in %s is unreadable (%s): the one before it is tried", summary, self.store.uri, exc)
                continue
            if seq <= newest_here:
                return None
            if not all(name in held for name in files):
                continue  # pruned under it: an older one may be whole
            for name in files:
                self.store.get(name)
            self.store.get(summary)
            self._synced |= {*files, summary}
            log.info("fetched checkpoint %d (%d files) from %s", seq, len(files), self.store.uri)
            return seq
        return None


def fetch(uri: str, into: Path) -> Path:
    """A checkpoint on an object store (a ckpt-*.pt object with the files its summary names, or the newest committed one
    of a folder) copied whole into the folder `into`: the local path to restore from (a warm start, a savepoint)."""
    if uri.rstrip("/").endswith(".pt"):
        folder, _, name = uri.rstrip("/").rpartition("/")
        store = RunStore.open(folder, scratch=into)
        summary = ckpt.summary_path(Path(name)).name
        try:
            files = [str(f) for f in json.loads(store.read_bytes(summary)).get("files") or [name]]
        except FileNotFoundError:
            files = [name]  # a lone file: it must be self-contained
        for file in [*files, summary] if summary in store.list() else files:
            store.get(file)
        return store.local / name
    store = RunStore.open(uri, scratch=into)
    CheckpointMirror(store).pull()
    return store.local
