"""Which scheduler backends a resource controller runs, from its flags: each is connected and checked at start-up."""

from __future__ import annotations

import argparse

from primus.runtime.backend_flags import add_backend_arguments
from primus.spec.backend_kinds import BackendKind, parse_backend
from services.resource_controller.backends.contract import BackendConfig, SchedulerBackend
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.local import LocalProcessBackend


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_arguments(parser, many=True)


def config_from(args: argparse.Namespace) -> BackendConfig:
    kinds = tuple(dict.fromkeys([BackendKind.LOCAL, *map(parse_backend, args.backend)]))
    return BackendConfig(
        kinds=kinds, kubernetes_api=args.kubernetes_api, kubernetes_config=args.kubernetes_config, kubernetes_namespace=args.kubernetes_namespace or "default",
        kubernetes_image=args.kubernetes_image or "primus:latest", kubernetes_owner_pod=args.kubernetes_owner_pod, kubernetes_env_secret=args.kubernetes_env_secret,
        kubernetes_pod_template=args.kubernetes_pod_template, yarn_address=args.yarn_address, ray_address=args.ray_address, slurm_conf=args.slurm_conf,
        slurm_partition=args.slurm_partition, keep_trainer_cores=args.local_trainer_cores != "shared",
    )  # fmt: skip


def _connect(kind: BackendKind, config: BackendConfig, hosts: HostHealth) -> SchedulerBackend:
    """Connect one remote backend; each is imported only when a controller runs it (their clients are heavy)."""
    backend: SchedulerBackend
    if kind is BackendKind.KUBERNETES:
        from services.resource_controller.backends.kubernetes import KubernetesBackend

        backend = KubernetesBackend.connect(config, hosts=hosts)
    elif kind is BackendKind.YARN:
        from services.resource_controller.backends.yarn import YarnBackend

        backend = YarnBackend.connect(config, hosts=hosts)
    elif kind is BackendKind.RAY:
        from services.resource_controller.backends.ray import RayBackend

        backend = RayBackend.connect(config, hosts=hosts)
    elif kind is BackendKind.SLURM:
        from services.resource_controller.backends.slurm import SlurmBackend

        backend = SlurmBackend.connect(config, hosts=hosts)
    else:
        raise ValueError(f"no backend {kind!r}")
    return backend


def build_backends(config: BackendConfig, local: SchedulerBackend | None = None, hosts: HostHealth | None = None) -> dict[BackendKind, SchedulerBackend]:
    """Every configured backend, connected and started, sharing one record of failing hosts (a host avoided for a job is
    avoided on every backend); raises BackendUnavailableError (closing what was built) if one cannot be used."""
    hosts = hosts or HostHealth()
    built: dict[BackendKind, SchedulerBackend] = {}
    try:
        for kind in config.kinds:  # the remote ones first: one that cannot be reached is the only thing said
            if kind is not BackendKind.LOCAL:
                built[kind] = _connect(kind, config, hosts)
        built[BackendKind.LOCAL] = local or LocalProcessBackend(keep_trainer_cores=config.keep_trainer_cores, hosts=hosts)
        for backend in built.values():
            backend.start()
    except BaseException:
        for backend in built.values():
            backend.close()
        raise
    return built
