"""Benchmark helper: a spawned child process driven by commands over a pipe (a reply that is an exception fails)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any


@dataclass
class Child:
    name: str
    process: mp.process.BaseProcess
    conn: Connection

    def call(self, *command: object) -> Any:
        self.conn.send(command)
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
