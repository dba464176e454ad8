"""Benchmark helper: a spawned child process driven by commands over a pipe (a reply that is an exception fails)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

Handler = Callable[..., Any]
POLL_SECONDS = 0.5  # how often a call waiting for its reply looks whether the child is still alive


@dataclass
class Child:
    name: str
    process: mp.process.BaseProcess
    conn: Connection

    def call(self, *command: object) -> Any:
        """Send a command and wait for its reply; a child that dies first (an import that fails, a crash) is an error
        naming its exit code, not a wait without end: the parent holds the pipe's other end, so no EOF would come."""
        self.conn.send(command)
        while not self.conn.poll(POLL_SECONDS):
            if not self.process.is_alive():
                raise RuntimeError(f"{self.name}: the process exited (code {self.process.exitcode}) before it answered {command[0]!r}")
        reply = self.conn.recv()
        if isinstance(reply, Exception):
            raise RuntimeError(f"{self.name}: {reply}")
        return reply

    def close(self) -> None:
        if self.process.is_alive():
            self.call("exit")
        self.process.join(timeout=30)


def spawn(name: str, target: Callable[..., None], *args: object) -> Child:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=target, args=(child, *args), name=name, daemon=True)
    process.start()
    return Child(name, process, parent)


def serve_commands(conn: Connection, handlers: dict[str, Handler], new_session: bool = False) -> None:
    """A child's loop: (command, *args) in, one reply out, until "exit"; "cpu" answers the child's CPU time.
    new_session: the child becomes a session of its own, as the resource controller starts its workers, so the
    scheduler shares the cores between them as it does there (with autogroup, per session)."""
    if new_session:
        os.setsid()
    handlers = {"cpu": time.process_time, **handlers}
    while True:
        command, *args = conn.recv()
        if command == "exit":
            conn.send(None)
            return
        try:
            conn.send(handlers[command](*args))
        except Exception as exc:  # noqa: BLE001 - the parent reports a child's failure
            conn.send(RuntimeError(f"{command}: {exc!r}"))
