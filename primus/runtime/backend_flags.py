"""The resource controller's backend flags, shared by its own command line and by `primus up` / `primus run`."""

from __future__ import annotations

import argparse

from primus.spec.backend_kinds import BackendKind

KINDS = tuple(kind.value for kind in BackendKind)
# flag -> help; each is passed through to the resource controller as given
FLAGS = {
    "--kubernetes-api": "the Kubernetes API server's URL (default: the kubeconfig's context, or in-cluster)",
    "--kubernetes-config": "a kubeconfig file",
    "--kubernetes-namespace": "the namespace executors' pods go in (default: default)",
    "--kubernetes-image": "the executors' image, unless a job names its own (default: primus:latest)",
    "--kubernetes-owner-pod": "the resource controller's own pod: executors' pods are owned by its Deployment (or StatefulSet; a bare pod by the pod)",
    "--kubernetes-pod-template": "a PodTemplate in the namespace every executor pod starts from (security context, tolerations, sidecars); ROLE=NAME,... per role",
    "--kubernetes-env-secret": "a Secret whose keys every executor pod gets as environment variables (an object store's credentials: AWS_ACCESS_KEY_ID, ...)",
    "--yarn-address": "host:port of the skein application master that hosts the executors",
    "--ray-address": "the Ray cluster's address (host:port, or auto for the one on this machine)",
    "--slurm-conf": "the Slurm cluster's slurm.conf (default: $SLURM_CONF, else Slurm's own default)",
    "--slurm-partition": "the partition executors' batch jobs go to unless a job names one (default: the cluster's default partition)",
    "--local-trainer-cores": "kept (default): a local trainer's training thread keeps cores of its own, data executors run on the others; shared: all share every core",
}
TRAINER_CORES = ("kept", "shared")  # --local-trainer-cores


def add_backend_arguments(parser: argparse.ArgumentParser, many: bool) -> None:
    """many: the controller's form (--backend repeatable, each a backend jobs may use); else one backend for this run."""
    group = parser.add_argument_group("scheduler backends")
    if many:
        group.add_argument("--backend", action="append", choices=KINDS, default=[], help="a backend jobs may ask for (repeatable); local is always there")
    else:
        group.add_argument("--backend", choices=KINDS, default=None, help="run the job's executors there (overrides the spec's resources.backend)")
    for flag, help_text in FLAGS.items():
        group.add_argument(flag, default="", choices=TRAINER_CORES if flag == "--local-trainer-cores" else None, help=help_text)


def controller_argv(args: argparse.Namespace) -> list[str]:
    """The resource controller's flags for the backends given on this command line."""
    kinds = args.backend if isinstance(args.backend, list) else [args.backend] if args.backend else []
    argv: list[str] = []
    for kind in dict.fromkeys(kinds):
        if kind != BackendKind.LOCAL:
            argv += ["--backend", kind]
    for flag in FLAGS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), "")
        if value:
            argv += [flag, value]
    return argv
