"""Leadership among masters that share a PostgreSQL store: whoever holds the advisory lock leads, the others stand by."""

from __future__ import annotations

import logging
import time
import zlib

import psycopg

from primus.runtime.settings import MasterSettings

log = logging.getLogger(__name__)


class Leadership:
    """Holds the lock on a connection of its own: a leader that dies loses it with its connection, and a standby's
    next try takes it. Keep the object (and its connection) alive as long as the master leads."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._key = zlib.crc32(url.encode())  # one lock per store: the masters that share a URL share it

    def try_acquire(self) -> bool:
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
        return bool(row and row[0])

    def acquire(self, poll_seconds: float = MasterSettings.leader_poll_seconds) -> None:
        """Block until this master leads, trying every poll_seconds (MasterSettings.leader_poll_seconds)."""
        if self.try_acquire():
            return
        log.info("standing by: another master leads (it holds the store's advisory lock %#x)", self._key)
        while not self.try_acquire():
            time.sleep(poll_seconds)
        log.warning("taking over: the leading master is gone; recovering its jobs")

    def close(self) -> None:
        self._conn.close()
