"""The Kubernetes backend's watch of its pods: list, then watch from the list's resourceVersion; a 410, an error or a resync lists again."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from services.resource_controller.backends.kubernetes_api import REQUEST_TIMEOUT, SELECTOR, KubernetesTuning, api_error, read_json, unreachable_reason
from services.resource_controller.backends.kubernetes_pods import JsonDict, backoff_delay

log = logging.getLogger(__name__)
_lines: Callable[[Any], Iterator[str]] = iter_resp_lines  # the client's helper, typed here


class _WatchGoneError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class _WatchError(Exception):
    """An ERROR event other than 410 in a watch stream."""


class PodWatch:
    """Follows the namespace's Primus pods and hands each change to the backend: seen(pod) for a listed, added or modified
    pod, deleted(pod) for a deleted one, and listed(names, started) after each list (what was missing from it is gone)."""

    def __init__(
        self,
        api: k8s.CoreV1Api,
        namespace: str,
        address: str,
        tuning: KubernetesTuning,
        seen: Callable[[JsonDict], None],
        deleted: Callable[[JsonDict], None],
        listed: Callable[[set[str], float], None],
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api, self._namespace, self._address, self._tuning = api, namespace, address, tuning
        self._seen, self._deleted, self._listed = seen, deleted, listed
        self._stop = stop
        self._clock = clock
        self._lock = threading.Lock()
        self._stream: Any = None
        self.lists = 0  # how many times it listed (the first, after each 410, resync or error)

    def run(self) -> None:
        """The watch thread's body, until stop is set."""
        version = ""
        failures = 0
        next_list = 0.0
        tuning = self._tuning
        while not self._stop.is_set():
            try:
                if not version or self._clock() >= next_list:
                    version = self._list()
                    next_list = self._clock() + tuning.resync_seconds
                timeout = max(1, min(tuning.watch_timeout_seconds, math.ceil(next_list - self._clock())))
                version = self._watch(version, timeout)
                failures = 0
            except _WatchGoneError as exc:
                log.info("kubernetes: the watch's resourceVersion expired (410 Gone: %s); listing again", exc)
                version = ""
            except (ApiException, _WatchError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    log.info("kubernetes: the watch's resourceVersion expired (410 Gone); listing again")
                    version = ""
                    continue
                if isinstance(exc, ApiException):
                    why = api_error(exc)
                elif isinstance(exc, urllib3.exceptions.HTTPError | OSError):
                    why = unreachable_reason(exc)
                else:
                    why = str(exc)
                delay = backoff_delay(failures, tuning.backoff_seconds, tuning.max_backoff_seconds)
                failures += 1
                log.warning("kubernetes: watching pods at %s failed (%s); listing again in %.1f s", self._address, why, delay)
                version = ""
                self._stop.wait(delay)
            except Exception:
                log.exception("kubernetes: the watch thread failed; listing again")
                version = ""
                self._stop.wait(backoff_delay(failures, tuning.backoff_seconds, tuning.max_backoff_seconds))
                failures += 1

    def interrupt(self) -> None:
        """Unblock the thread reading the watch stream: shut its socket down (the reader then sees the stream end)."""
        with self._lock:
            response = self._stream
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _list(self) -> str:
        """List the namespace's Primus pods and hand each over; returns the resourceVersion."""
        started = self._clock()
        data = read_json(self._api.list_namespaced_pod(self._namespace, label_selector=SELECTOR, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        self.lists += 1
        pods = data.get("items") or []
        for pod in pods:
            self._seen(pod)
        self._listed({str((p.get("metadata") or {}).get("name", "")) for p in pods}, started)
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str, timeout: int) -> str:
        """Follow changes from `version` for up to `timeout` seconds; returns the last resourceVersion seen (events and bookmarks)."""
        response: Any = self._api.list_namespaced_pod(
            self._namespace, label_selector=SELECTOR, watch=True, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=timeout,
            _request_timeout=(REQUEST_TIMEOUT[0], timeout + 15.0), _preload_content=False,
        )  # fmt: skip
        with self._lock:
            self._stream = response
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _WatchGoneError(str(obj.get("message", "")))
                    raise _WatchError(f"{obj.get('code')} {obj.get('reason', '')}: {obj.get('message', '')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED"):
                    self._seen(obj)
                elif kind == "DELETED":
                    self._deleted(obj)
        finally:
            with self._lock:
                self._stream = None
            response.release_conn()
        return version
