"""The operator's I/O: a watch on TrainingJob objects and a periodic look at each one, acting by decide()."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from primus.client import AccessDeniedError, JobView, PrimusClient
from primus.errors import NotFoundError, PrimusError, SpecError
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.operator.decide import (
    FINALIZER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Action,
    AddFinalizer,
    Cancel,
    Emit,
    PatchStatus,
    RemoveFinalizer,
    Submit,
    TrainingJobObject,
    decide,
    refused_status,
)
from services.operator.status import Event, EventType, rfc3339

log = logging.getLogger("primus.operator")
_watch: Callable[[], Any] = k8s_watch.Watch  # the client's watch, untyped: typed here
COMPONENT = "primus-operator"
ADOPT_SLACK_SECONDS = 1.0  # creationTimestamp has whole seconds: a job submitted within its second counts as after it
Json = dict[str, Any]
Key = tuple[str, str]


def merge_patch(old: Json, new: Json) -> Json:
    """The JSON merge patch from old to new at the top level: fields new lacks are cleared (null)."""
    return {**dict.fromkeys((k for k in old if k not in new), None), **new}


class Reconciler:
    """Watches TrainingJobs (one namespace, or all), and reconciles each on every change and every resync_seconds."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        master: PrimusClient,
        namespace: str = "",
        resync_seconds: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._objects = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._master = master
        self._namespace = namespace  # "" watches every namespace
        self._resync_seconds = resync_seconds
        self._clock = clock
        self._queue: queue.Queue[Key | None] = queue.Queue()
        self._queued: set[Key] = set()
        self._known: set[Key] = set()  # objects seen and not deleted
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.reconciles = 0  # for tests and the log: how many looks were taken

    # --- running ----------------------------------------------------------------------------------

    def start(self) -> Reconciler:
        for target, name in ((self._watch_forever, "operator-watch"), (self._work_forever, "operator-work"), (self._resync_forever, "operator-resync")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=5)

    @property
    def known(self) -> int:
        with self._lock:
            return len(self._known)

    def enqueue(self, key: Key) -> None:
        with self._lock:
            if key in self._queued:
                return
            self._queued.add(key)
        self._queue.put(key)

    def _watch_forever(self) -> None:
        """List, then watch from the list's resourceVersion; on any end or error (410 Gone included), list again."""
        while not self._stopping.is_set():
            try:
                listed = self._list()
                keys = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in listed["items"]}
                with self._lock:
                    self._known = keys
                for key in keys:
                    self.enqueue(key)
                stream = _watch().stream(self._list_call(), resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=300, allow_watch_bookmarks=True)
                for event in stream:
                    if self._stopping.is_set():
                        return
                    if event["type"] == "ERROR":  # 410 Gone among them: list again
                        break
                    if event["type"] == "BOOKMARK":
                        continue
                    metadata = event["object"]["metadata"]
                    key = (metadata.get("namespace", ""), metadata["name"])
                    if event["type"] == "DELETED":
                        with self._lock:
                            self._known.discard(key)
                        continue
                    with self._lock:
                        self._known.add(key)
                    self.enqueue(key)
            except (ApiException, OSError, ValueError) as exc:
                log.warning("watching TrainingJobs: %s; listing again", _api_error(exc))
                self._stopping.wait(1.0)
            except Exception:
                log.exception("watching TrainingJobs failed; listing again")
                self._stopping.wait(1.0)

    def _list_call(self) -> Callable[..., Any]:
        if self._namespace:
            return lambda **kw: self._objects.list_namespaced_custom_object(GROUP, VERSION, self._namespace, PLURAL, **kw)
        return lambda **kw: self._objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)

    def _list(self) -> Json:
        listed: Json = self._list_call()()
        return listed

    def _resync_forever(self) -> None:
        while not self._stopping.wait(self._resync_seconds):
            with self._lock:
                keys = list(self._known)
            for key in keys:
                self.enqueue(key)

    def _work_forever(self) -> None:
        while True:
            key = self._queue.get()
            if key is None or self._stopping.is_set():
                return
            with self._lock:
                self._queued.discard(key)
            try:
                self.reconcile(key)
            except (ApiException, PrimusError, OSError) as exc:
                log.warning("TrainingJob %s/%s: %s; trying again at the next look", key[0], key[1], _api_error(exc))
            except Exception:
                log.exception("TrainingJob %s/%s: reconcile failed; trying again at the next look", *key)

    # --- one look ---------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> None:
        """Read the object and its job, decide, act."""
        namespace, name = key
        try:
            raw: Json = self._objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[assignment]
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        self.reconciles += 1
        obj = TrainingJobObject.from_json(raw)
        job = self._job_of(obj)
        decisions: list[rc_pb2.ScalingDecision] = []
        if job is not None and not obj.deleting:
            job, decisions = self._master.get_with_scaling(job.job_id)
        for action in decide(obj, job, decisions, self._clock()):
            self._apply(obj, raw, action)

    def _job_of(self, obj: TrainingJobObject) -> JobView | None:
        """Its job by the status's jobId; else one of its name and namespace submitted since the object was created
        (an operator that stopped between submitting and writing the status adopts it rather than submit twice)."""
        if obj.job_id:
            try:
                return self._master.get(obj.job_id)
            except NotFoundError:
                return None
        mine = [
            j for j in self._master.list()
            if j.namespace == obj.namespace and j.name == obj.name and j.created_unix >= obj.created_unix - ADOPT_SLACK_SECONDS
        ]  # fmt: skip
        return max(mine, key=lambda j: j.created_unix) if mine else None

    def _apply(self, obj: TrainingJobObject, raw: Json, action: Action) -> None:
        namespace, name = obj.key
        match action:
            case AddFinalizer():
                finalizers = [*obj.finalizers, FINALIZER]
                self._objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": finalizers}})
            case RemoveFinalizer():
                finalizers = [f for f in obj.finalizers if f != FINALIZER]
                self._objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": finalizers}})
                log.info("TrainingJob %s/%s: its job ended; the object goes", namespace, name)
            case Submit(job=job):
                try:
                    job_id = self._master.submit(job)
                except (SpecError, AccessDeniedError) as exc:  # the master refused it (or its model): said once, not tried again
                    reason = "Forbidden" if isinstance(exc, AccessDeniedError) else "InvalidSpec"
                    problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
                    self._status(obj, refused_status(obj, problems, self._clock(), reason))
                    self._event(obj, raw, Event(EventType.WARNING, reason, "; ".join(problems)))
                    return
                log.info("TrainingJob %s/%s: submitted as job %s", namespace, name, job_id)
                self._status(obj, {"jobId": job_id, "state": "Pending", "observedGeneration": obj.generation})
                self._event(obj, raw, Event(EventType.NORMAL, "Submitted", f"submitted to the master as job {job_id}"))
                self.enqueue(obj.key)  # the next look fills in the status
            case Cancel(job_id=job_id):
                view = self._master.cancel(job_id)
                log.info("TrainingJob %s/%s deleted: job %s cancelled (%s)", namespace, name, job_id, view.state.value)
                self._event(obj, raw, Event(EventType.NORMAL, "Cancelling", f"the TrainingJob was deleted: job {job_id} is cancelled and its executors released"))
            case PatchStatus(status=status):
                self._status(obj, status)
            case Emit(event=event):
                self._event(obj, raw, event)

    def _status(self, obj: TrainingJobObject, status: Json) -> None:
        namespace, name = obj.key
        patch = {"status": merge_patch(obj.status, status)}
        self._objects.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, patch)

    def _event(self, obj: TrainingJobObject, raw: Json, event: Event) -> None:
        namespace, name = obj.key
        now = rfc3339(self._clock())
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": name,
                "namespace": namespace,
                "uid": obj.uid,
                "resourceVersion": str(raw["metadata"].get("resourceVersion", "")),
            },
            "reason": event.reason,
            "message": event.message[:1024],
            "type": event.type.value,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
        }
        try:
            self._core.create_namespaced_event(namespace, body)
        except ApiException as exc:  # an event is worth a line in the log, never a failed reconcile
            log.warning("TrainingJob %s/%s: event %s not recorded: %s", namespace, name, event.reason, _api_error(exc))


def _api_error(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"the API server answered {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
