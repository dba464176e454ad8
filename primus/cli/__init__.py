"""The primus command: the services (up, down, restart), jobs (submit, run, demo, get, describe, logs, status, cancel,
stop, suspend, resume, scale, delete), specs (validate, plan), runs (report, cost, scaling, explore) and config. The
verbs that talk to a master go through primus.client (the SDK), to the master contexts.py finds."""

from __future__ import annotations

import signal

import grpc

from primus.auth import security
from primus.cli.commands import EXIT_CREDENTIALS, EXIT_DENIED, EXIT_USER_ERROR
from primus.cli.parser import build_parser
from primus.client import AccessDeniedError, CredentialsRefusedError, JobConflictError, JobNotFoundError, MasterUnreachableError
from primus.errors import PrimusError, SpecError, UserError
from primus.tools.console import err_console

__all__ = ["EXIT_CREDENTIALS", "EXIT_DENIED", "EXIT_USER_ERROR", "build_parser", "main"]


def _interrupt_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C so `primus run` still tears its services down."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _interrupt_on_sigterm()
    try:
        code: int = args.fn(args)
        return code
    except SpecError as exc:
        for problem in exc.problems:
            err_console.print(f"[red]error[/red]: {problem}", highlight=False)
        return EXIT_USER_ERROR
    except CredentialsRefusedError as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        return EXIT_CREDENTIALS
    except security.SecurityError as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        return EXIT_USER_ERROR
    except AccessDeniedError as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        return EXIT_DENIED
    except (UserError, MasterUnreachableError, JobNotFoundError, JobConflictError) as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        return EXIT_USER_ERROR
    except PrimusError as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False)
        return 1
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # the service refused what the user gave it
            err_console.print(f"[red]error[/red]: {exc.details()}", highlight=False)
            return EXIT_USER_ERROR
        err_console.print(f"[red]error[/red]: {exc.code().name}: {exc.details()}", highlight=False)
        return 1
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
