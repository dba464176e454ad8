"""Which scheduler backends a resource controller runs, from its flags: each is connected and checked at start-up."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from primus.backend_flags import add_backend_arguments
from primus.errors import PrimusError
from services.resource_controller.backend import LocalProcessBackend, SchedulerBackend


class BackendUnavailableError(PrimusError):
    """A backend that cannot be used: one line naming the backend, the address and what to check."""


@dataclass(frozen=True)
class BackendConfig:
    """The deployment's side of each backend; a job's own side (pod template, queue, Ray resources) is in its spec."""

    kinds: tuple[str, ...] = ("local",)
    kubernetes_api: str = ""  # the API server's URL; empty: the kubeconfig's current context, or the in-cluster config
    kubernetes_config: str = ""  # a kubeconfig file
    kubernetes_namespace: str = "default"
    kubernetes_image: str = "primus:latest"
    kubernetes_owner_pod: str = ""  # the controller's own pod: executors' pods are owned by its workload (see owner_reference)
    kubernetes_env_secret: str = ""  # a Secret every executor pod takes its environment from (envFrom): the object store's credentials
    kubernetes_pod_template: str = ""  # PodTemplate NAME (every role's), or ROLE=NAME,...: what each executor pod starts from
    yarn_address: str = ""  # host:port of the skein application master that hosts the executors
    ray_address: str = ""  # a Ray cluster's address (ray://..., host:port, or auto)
    keep_trainer_cores: bool = True  # local: each trainer's training thread keeps cores of its own (primus.cores)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_arguments(parser, many=True)


def config_from(args: argparse.Namespace) -> BackendConfig:
    kinds = tuple(dict.fromkeys(["local", *args.backend]))
    return BackendConfig(
        kinds, args.kubernetes_api, args.kubernetes_config, args.kubernetes_namespace or "default", args.kubernetes_image or "primus:latest",
        args.kubernetes_owner_pod, args.kubernetes_env_secret, args.kubernetes_pod_template, args.yarn_address, args.ray_address, args.local_trainer_cores != "shared",
    )  # fmt: skip


def _kubernetes(config: BackendConfig) -> SchedulerBackend:
    from services.resource_controller.kubernetes_backend import KubernetesBackend

    backend: SchedulerBackend = KubernetesBackend.connect(config)
    return backend


def _yarn(config: BackendConfig) -> SchedulerBackend:
    from services.resource_controller.yarn_backend import YarnBackend

    backend: SchedulerBackend = YarnBackend.connect(config)
    return backend


def _ray(config: BackendConfig) -> SchedulerBackend:
    from services.resource_controller.ray_backend import RayBackend

    backend: SchedulerBackend = RayBackend.connect(config)
    return backend


BUILDERS: dict[str, Callable[[BackendConfig], SchedulerBackend]] = {"kubernetes": _kubernetes, "yarn": _yarn, "ray": _ray}


def build_backends(config: BackendConfig, local: SchedulerBackend | None = None) -> dict[str, SchedulerBackend]:
    """Every configured backend, connected; raises BackendUnavailableError (closing what was built) if one cannot be used."""
    built: dict[str, SchedulerBackend] = {}
    try:
        for kind in config.kinds:  # the remote ones first: one that cannot be reached is the only thing said
            if kind != "local":
                built[kind] = BUILDERS[kind](config)
        built["local"] = local or LocalProcessBackend(keep_trainer_cores=config.keep_trainer_cores)
    except BaseException:
        for backend in built.values():
            backend.close()
        raise
    return built
