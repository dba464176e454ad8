"""The TrainingJob status as the CRD declares it, and the columns `kubectl get trainingjobs` prints (scripts/gen_crd.py)."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

_INT = {"type": "integer", "format": "int64"}

CONDITION: Json = {
    "type": "object",
    "description": "A metav1.Condition.",
    "required": ["type", "status", "reason", "lastTransitionTime"],
    "properties": {
        "type": {"type": "string", "description": "Admitted, Running, Scaling, Recovering, Succeeded or Failed"},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string", "description": "one CamelCase word: why"},
        "message": {"type": "string", "description": "what happened, for a person"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": _INT,
    },
}

SOURCE: Json = {
    "type": "object",
    "description": "One source's counters, from the planner's ledger.",
    "properties": {
        "name": {"type": "string"},
        "samples": {**_INT, "description": "samples trained (committed by a checkpoint) or evaluated"},
        "pendingRows": {**_INT, "description": "estimated rows of tasks waiting to be leased"},
        "recordsQuarantined": {**_INT, "description": "records set aside with their reason (a bad value, a bad label)"},
        "tasksDone": _INT,
        "tasksQuarantined": {**_INT, "description": "tasks given up after their retries (their partition unreadable)"},
    },
}

STATUS: Json = {
    "type": "object",
    "description": "The job as the operator last saw it at the master.",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "jobId": {"type": "string", "description": "the job's id at the master (primus get job ID)"},
        "state": {"type": "string", "description": "Pending, Planning, Running, Suspended, Succeeded, Failed or Cancelled"},
        "message": {"type": "string", "description": "why it is in that state"},
        "progress": {"type": "string", "description": "tasks done of tasks planned, in percent"},
        "eta": {"type": "string", "description": "the time left at the pace so far"},
        "samples": {**_INT, "description": "samples trained"},
        "lag": {**_INT, "description": "estimated rows known but not yet leased, over every source"},
        "restarts": {**_INT, "description": "restarts of trainers, data executors and the planner"},
        "scalingDecisions": {**_INT, "description": "scaling decisions so far (each one an event)"},
        "recovery": {
            "type": "object",
            "description": "while Recovering: the samples trained and the job's last update when the restart was seen",
            "properties": {"samples": _INT, "updated": {"type": "number"}},
        },
        "observedGeneration": {**_INT, "description": "the generation of the spec the job runs"},
        "ignoredGeneration": {**_INT, "description": "a later generation of the spec, not run (a job's spec is fixed once submitted)"},
        "startTime": {"type": "string", "format": "date-time"},
        "completionTime": {"type": "string", "format": "date-time"},
        "conditions": {"type": "array", "items": CONDITION, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        "sources": {"type": "array", "items": SOURCE},
    },
}

PRINTER_COLUMNS: list[Json] = [
    {"name": "State", "type": "string", "jsonPath": ".status.state"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
    {"name": "ETA", "type": "string", "jsonPath": ".status.eta"},
    {"name": "Samples", "type": "integer", "jsonPath": ".status.samples"},
    {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Job", "type": "string", "jsonPath": ".status.jobId", "priority": 1},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
]
