"""How a Primus process reaches a Kubernetes API server: a kubeconfig, in-cluster, or ~/.kube/config; an API URL overrides the host."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from primus.errors import PrimusError

_kubeconfig: Any = k8s_config


class NoApiServerError(PrimusError):
    """No Kubernetes API server can be reached with what was given: one line saying what was tried and what to pass."""


def client_configuration(api: str = "", kubeconfig: str = "", api_flag: str = "--kubernetes-api", config_flag: str = "--kubernetes-config") -> k8s.Configuration:
    """kubeconfig (a file), else in-cluster, else ~/.kube/config; api (a URL or host:port) sets the host. The flags name
    the options in the error."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            _kubeconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)
        elif not api:
            try:
                _kubeconfig.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                _kubeconfig.load_kube_config(client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = f"the kubeconfig {kubeconfig}" if kubeconfig else "not in a pod, and no usable ~/.kube/config"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NoApiServerError(f"kubernetes: no API server to talk to ({where}: {first}): pass {api_flag}, or {config_flag} with a kubeconfig") from None
    if api:
        api = api.rstrip("/")
        configuration.host = api if "://" in api else f"https://{api}"
    return configuration
