"""Run the TrainingJob operator: python -m services.operator --master ADDR [--namespace NS] [--kubernetes-api URL]."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from kubernetes import client as k8s
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from primus.client import PrimusClient
from primus.runtime import kube_connect, metrics_http, rpc
from services.operator.reconciler import Reconciler


def _metrics(reconciler: Reconciler) -> Iterable[Metric]:
    looks = CounterMetricFamily("primus_operator_reconciles", "Looks the operator took at TrainingJob objects")
    looks.add_metric([], reconciler.reconciles)
    known = GaugeMetricFamily("primus_operator_trainingjobs", "TrainingJob objects the operator watches")
    known.add_metric([], reconciler.known)
    return [looks, known]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.operator", description=__doc__)
    parser.add_argument("--master", required=True, help="the master's address (host:port); credentials from PRIMUS_TLS_* and PRIMUS_TOKEN")
    parser.add_argument("--namespace", default="", help="watch TrainingJobs in this namespace only (default: every namespace)")
    parser.add_argument("--kubernetes-api", default="", help="the API server's URL (default: in-cluster, else the kubeconfig's context)")
    parser.add_argument("--kubernetes-config", default="", help="a kubeconfig file")
    parser.add_argument("--resync-seconds", type=float, default=2.0, help="how often each TrainingJob's job is looked at between changes (default 2)")
    parser.add_argument("--bind-host", default="0.0.0.0", help="the host the metrics endpoint listens on")
    parser.add_argument("--ready-file", default=None, help="write the metrics address here once watching")
    metrics_http.add_port_argument(parser)
    args = parser.parse_args()
    rpc.configure_logging("operator")
    if args.resync_seconds <= 0:
        print(f"error: operator: --resync-seconds {args.resync_seconds}: must be more than 0 seconds", file=sys.stderr)
        raise SystemExit(2)
    try:
        configuration = kube_connect.client_configuration(args.kubernetes_api, args.kubernetes_config)
    except kube_connect.NoApiServerError as exc:
        print(f"error: operator: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    master = PrimusClient(args.master)
    reconciler = Reconciler(k8s.ApiClient(configuration), master, args.namespace, args.resync_seconds).start()
    endpoint = metrics_http.serve(args.bind_host, args.metrics_port, process=True)
    endpoint.add(lambda: _metrics(reconciler))
    if args.ready_file:
        Path(args.ready_file).write_text(endpoint.address + "\n")
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    stopping.wait()
    reconciler.stop()
    endpoint.stop()
    master.close()


if __name__ == "__main__":
    main()
