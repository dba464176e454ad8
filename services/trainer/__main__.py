"""Run the trainer for one job; launched by the resource controller."""

from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch allocates: embedding tables on huge pages (fewer TLB misses)

import logging
import signal
import sys
from types import FrameType

import torch

from primus.data.planner_calls import PLAN_LOST_EXIT_CODE, PlanLostError
from primus.errors import PrimusError, disk_full
from primus.runtime import cores, metrics_http, rpc, telemetry
from primus.runtime.worker import fetch_job_spec, parse_worker_args, register
from services.trainer.data_parallel import GANG_LOST_EXIT_CODE, GangLostError
from services.trainer.server import DONE_PHASE, report_failure, run_trainer, start_heartbeats, start_status_server
from services.trainer.servicer import TrainerStatus

log = logging.getLogger("services.trainer")


def _exit_on_sigterm(status: TrainerStatus) -> None:
    """Released once its work is done, the trainer exits 0; stopped before (a cancel), it exits 143."""

    def handler(signum: int, frame: FrameType | None) -> None:
        done = status.phase == DONE_PHASE
        log.info("signal %d: stopping %s", signum, "with the work done" if done else "before the work was done")
        raise SystemExit(0 if done else 128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main() -> int:
    args = parse_worker_args("python -m services.trainer", __doc__ or "")
    cores.enter_trainer()  # before any thread starts: they all run on the shared cores
    rpc.configure_logging(args.executor_id)
    telemetry.setup_tracing("trainer", args.traces_root, job_id=args.job_id, runs_uri=args.runs_uri)
    telemetry.join_launch_context(args.job_id)
    torch.set_num_threads(max(1, round(float(os.environ.get("PRIMUS_CPU_LIMIT", "1")))))
    status = TrainerStatus(trainer_id=args.executor_id, job_id=args.job_id)
    server = start_status_server(status, metrics_http.port_from_env())
    log.info("serving: status %s, metrics %s", server.address, server.metrics_address or "off")
    code = 0
    _exit_on_sigterm(status)
    heartbeats = None
    try:
        register(args, server.address)
        heartbeats = start_heartbeats(args, status)
        job = fetch_job_spec(args.master, args.job_id, args.settings)
        cores.to_step_cores()  # this thread runs the model step, on the cores the local backend kept for it
        result = run_trainer(args, job, status)
        log.info("trained %d steps on %d samples; eval auc %.4f logloss %.4f", result.steps, result.train_samples, result.auc, result.logloss)
    except GangLostError as exc:
        log.error("stopping the rank: %s; the master restarts every rank from the last checkpoint", exc)
        code = GANG_LOST_EXIT_CODE
    except PlanLostError as exc:
        log.error("stopping without a result: %s; the last checkpoint is kept for the restart", exc)
        code = PLAN_LOST_EXIT_CODE
    except PrimusError as exc:
        log.error("training failed: %s", exc)
        report_failure(args, str(exc))
        code = 1
    except Exception as exc:
        if disk_full(exc):  # nothing wrong with the job: the master starts the trainer again from its last checkpoint
            log.error("stopping without a result: the disk is full (%s); the last checkpoint is kept for the restart", exc)
            code = PLAN_LOST_EXIT_CODE
        else:
            log.exception("training failed")
            report_failure(args, f"{type(exc).__name__}: {exc}")
            code = 1
    finally:
        if heartbeats is not None:
            heartbeats.stop()
        server.stop(grace=1.0)
        telemetry.shutdown_tracing()
        args.remove_scratch()  # _exit skips atexit: the checkpoints and snapshots are in the store by now
    return code


def _exit(code: int) -> None:
    """Exit without interpreter teardown: torch and gRPC threads make it slow, and a release landing in it (when
    Python no longer runs signal handlers) would end a finished trainer with -15 instead of its own code."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
