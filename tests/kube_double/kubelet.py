"""The Kubernetes double's kubelet on its one node: schedules a pod, runs its first container as a local process, ends it.

A pod that does not fit (its requests above what the scheduled pods leave, `node_memory_mib` and `node_cpu` of the
double) stays Pending with PodScheduled False, "0/1 nodes are available: 1 Insufficient memory."; once it fits it runs
the first container's command as a local process ("python" is this interpreter, the working directory is the
repository root, the environment is the pod's, with the downward API's status.podIP as 127.0.0.1, output appended to
the file the `primus.io/log-path` annotation names) and reports it Running with podIP 127.0.0.1. A process that ends
leaves the container terminated (exitCode, reason Completed or Error) and the pod Succeeded or Failed. An RSS watchdog
over the process group stands in for the memory cgroup: above the memory limit it is killed (-9, reason OOMKilled, exit
code 137). A deleted pod's process gets SIGTERM, SIGKILL after the grace period.

Env entries from a Secret (`valueFrom.secretKeyRef`) are resolved, and `secret` volumes are written to a folder of the
pod's and bind-mounted at their mountPath in a mount namespace of the container's own (`unshare --mount`, as root), so
the process reads them where the manifest says; a missing Secret leaves the pod Pending with the container waiting,
reason CreateContainerConfigError, as a kubelet does.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.kube_double.pod_status import (
    MIB,
    NODE,
    POD_IP,
    container_status,
    pod_cpu,
    pod_memory_mib,
    resolve_env,
    set_condition,
    set_container_state,
)
from tests.kube_double.wire import Json, stamp

if TYPE_CHECKING:
    from tests.kube_double.server import KubeApiDouble

PAGE = os.sysconf("SC_PAGE_SIZE")
IMAGE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")  # what an image would set; taken from this process


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in the process group (the container's processes)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            total += int((stat.parent / "statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class StoredPod:
    """A stored pod and what its kubelet knows of it."""

    obj: Json
    kubelet: bool  # False: a pod added by the test (the controller's own), which the double does not run
    scheduled: bool = False
    process: subprocess.Popen[bytes] | None = None
    exited: bool = False
    deletion_deadline: float | None = None  # monotonic: SIGKILL then
    memory_limit_mib: float = 0.0
    log_file: Path | None = None


class Kubelet:
    """Runs the double's pods, one thread each (`run`), in the double's lock and store."""

    def __init__(self, double: KubeApiDouble) -> None:
        self.double = double

    def run(self, key: tuple[str, str], pod: StoredPod) -> None:
        """Schedule, start, watch and end one pod's first container."""
        if not self._schedule(key, pod):
            return
        process = self._start(key, pod)
        while process is None and self._waits_for_config(key, pod):  # a kubelet tries again until the Secret is there
            time.sleep(0.2)
            process = self._start(key, pod)
        if process is None:
            return
        oom, term_sent, next_check = False, False, 0.0
        while process.poll() is None:
            time.sleep(0.05)
            with self.double._lock:
                removed = self.double._pods.get(key) is not pod
                closing, deadline, limit = self.double._closing, pod.deletion_deadline, pod.memory_limit_mib
            if removed or closing:
                kill_group(process.pid, signal.SIGKILL)
                break
            if deadline is not None:
                if not term_sent:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGTERM)
                    term_sent = True
                if time.monotonic() >= deadline:
                    kill_group(process.pid, signal.SIGKILL)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.double.watchdog_seconds
                if group_rss(process.pid) > limit * MIB:
                    oom = True
                    kill_group(process.pid, signal.SIGKILL)
        code = process.wait()
        kill_group(process.pid, signal.SIGKILL)  # the container's other processes go with it
        self._terminated(key, pod, code, oom)

    def _why_not(self, pod: StoredPod) -> str:
        if self.double.unschedulable:
            return self.double.unschedulable
        used = [p.obj for p in self.double._pods.values() if p is not pod and p.kubelet and p.scheduled and not p.exited]
        if pod_memory_mib(pod.obj) > self.double.node_memory_mib - sum(pod_memory_mib(o) for o in used):
            return "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        if pod_cpu(pod.obj) > self.double.node_cpu - sum(pod_cpu(o) for o in used):
            return "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        return ""

    def _schedule(self, key: tuple[str, str], pod: StoredPod) -> bool:
        delay = 0.02
        while True:
            with self.double._lock:
                if self.double._pods.get(key) is not pod or self.double._closing:
                    return False
                why = self._why_not(pod)
                if not why:
                    pod.scheduled = True
                    pod.obj["spec"]["nodeName"] = NODE
                    set_condition(pod.obj, "PodScheduled", "True", "", "")
                    self.double._record(pod, "MODIFIED")
                    return True
                scheduled = next((c for c in pod.obj["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                if scheduled is None or scheduled.get("message") != why:
                    set_condition(pod.obj, "PodScheduled", "False", "Unschedulable", why)
                    self.double._record(pod, "MODIFIED")
            time.sleep(delay)
            delay = 0.2

    def _waits_for_config(self, key: tuple[str, str], pod: StoredPod) -> bool:
        with self.double._lock:
            status = container_status(pod.obj, pod.obj["spec"]["containers"][0]["name"]) or {}
            waiting = (status.get("state") or {}).get("waiting") or {}
            return self.double._pods.get(key) is pod and not self.double._closing and waiting.get("reason") == "CreateContainerConfigError"

    def _secret_value(self, namespace: str, name: str, key: str | None) -> str:
        """One key of a Secret, or (key None) its keys, a line each; KeyError naming what is missing."""
        data = self._secret_data(namespace, name)
        if data is None:
            raise KeyError(name)
        return "\n".join(sorted(data)) if key is None else data[key].decode()

    def _secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        found = self.double._secrets.get((namespace, name))
        return None if found is None else {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}

    def _mounts(self, pod: StoredPod, container: Json) -> list[tuple[Path, str]]:
        """The pod's secret volumes written to folders of its own: (folder, mountPath); KeyError naming a missing Secret."""
        namespace = pod.obj["metadata"]["namespace"]
        volumes = {v["name"]: v for v in pod.obj["spec"].get("volumes") or []}
        mounts = []
        for mount in container.get("volumeMounts") or []:
            secret = (volumes.get(mount["name"]) or {}).get("secret")
            if secret is None:
                continue  # only secret volumes are materialised by this double
            data = self._secret_data(namespace, secret["secretName"])
            if data is None:
                raise KeyError(f'secret "{secret["secretName"]}" not found')
            folder = self.double._logs / f"volumes-{pod.obj['metadata']['uid']}-{mount['name']}"
            folder.mkdir(parents=True, exist_ok=True)
            items = secret.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = folder / item["path"]
                target.write_bytes(data[item["key"]])
                os.chmod(target, int(secret.get("defaultMode", 0o644)))
            mounts.append((folder, str(mount["mountPath"])))
        return mounts

    def _start(self, key: tuple[str, str], pod: StoredPod) -> subprocess.Popen[bytes] | None:
        with self.double._lock:
            if self.double._pods.get(key) is not pod or self.double._closing:
                return None
            container = pod.obj["spec"]["containers"][0]
            command = [*(container.get("command") or []), *(container.get("args") or [])]
            env = {k: os.environ[k] for k in IMAGE_ENV if k in os.environ}
            try:
                env.update(resolve_env(pod.obj, container, lambda name, k: self._secret_value(key[0], name, k)))
                mounts = self._mounts(pod, container)
            except KeyError as exc:
                set_container_state(pod.obj, container, {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc).strip("'\"")}}, ready=False)
                self.double._record(pod, "MODIFIED")
                return None
            annotated = (pod.obj["metadata"].get("annotations") or {}).get("primus.io/log-path")
            pod.log_file = Path(annotated) if annotated and self.double.write_log_path else self.double._logs / f"{key[0]}-{key[1]}.log"
            try:
                if not command:
                    raise OSError("no command: the double runs no image entrypoint")
                if command[0] == "python":
                    command[0] = sys.executable
                if mounts:  # each secret volume at its mountPath, seen by this container alone
                    binds = " && ".join(f'mkdir -p "{path}" && mount --bind "{folder}" "{path}"' for folder, path in mounts)
                    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{binds} && exec "$@"', "sh", *command]
                pod.log_file.parent.mkdir(parents=True, exist_ok=True)
                with pod.log_file.open("ab") as out:
                    process = subprocess.Popen(
                        command, cwd=self.double.repo_root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
            except OSError as exc:
                pod.exited = True
                set_container_state(
                    pod.obj, container, {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(exc), "finishedAt": stamp()}}, ready=False
                )
                pod.obj["status"]["phase"] = "Failed"
                self.double._record(pod, "MODIFIED")
                return None
            pod.process = process
            now = stamp()
            status = pod.obj["status"]
            status.update(phase="Running", podIP=POD_IP, podIPs=[{"ip": POD_IP}], hostIP=POD_IP, hostIPs=[{"ip": POD_IP}], startTime=now)
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
                set_condition(pod.obj, kind, "True", "", "")
            set_container_state(pod.obj, container, {"running": {"startedAt": now}}, ready=True)
            self.double._record(pod, "MODIFIED")
            return process

    def _terminated(self, key: tuple[str, str], pod: StoredPod, code: int, oom: bool) -> None:
        exit_code = code if code >= 0 else 128 - code
        reason = "OOMKilled" if oom else "Completed" if exit_code == 0 else "Error"
        with self.double._lock:
            pod.exited = True
            if self.double._pods.get(key) is not pod:
                return  # already removed (a delete with no grace)
            container = pod.obj["spec"]["containers"][0]
            started = ((container_status(pod.obj, container["name"]) or {}).get("state") or {}).get("running", {}).get("startedAt", stamp())
            state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": stamp(), "containerID": f"containerd://{key[1]}"}}
            set_container_state(pod.obj, container, state, ready=False)
            pod.obj["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            for kind in ("Ready", "ContainersReady"):
                set_condition(pod.obj, kind, "False", "PodCompleted" if exit_code == 0 else "PodFailed", "")
            self.double._record(pod, "MODIFIED")
            if pod.deletion_deadline is not None:
                self.double._remove(key)
