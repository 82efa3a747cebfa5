"""Entry point of ``cdcflow``: registers the command groups and turns errors into clean messages."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from cdc_core import log
from cdc_core.errors import CdcflowError

err_console = Console(stderr=True)

# name -> (module, attribute, help). A group's module is imported only when its command runs (or for
# ``--help``): ``changefeed`` pulls in the engine, which ``cdcflow tso now`` should not pay for (~1 s).
_GROUPS: dict[str, tuple[str, str, str]] = {
    "upstream": ("upstream_cmd", "app", "Run and drive the embedded upstream cluster."),
    "changefeed": ("changefeed_cmd", "app", "Create, run and inspect changefeeds."),
    "capture": ("capture_cmd", "app", "Run a changefeed's continuous capture (its long-lived subscriptions)."),
    "tso": ("tso_cmd", "app", "TSO timestamps."),
    "maintain": ("maintain_cmd", "maintain",
                 "Purge, compact and vacuum a changefeed's Delta tables; prune its bronze changelog."),
    "snapshot": ("snapshot_cmd", "snapshot",
                 "Name every table's Delta version holding the changefeed at a TSO (one consistent cut)."),
    "verify": ("verify_cmd", "verify",
               "Compare every replicated table at a ts with its Delta table; exit 1 on any difference."),
}


def build_app(argv: list[str] | None = None) -> typer.Typer:
    """A fresh ``cdcflow`` app. With ``argv``, only the group it invokes is imported and registered for real;
    the others are placeholders that keep their names and help in ``cdcflow --help``. Without it, every group
    is real: for running several commands in one process (tests, embedding)."""
    import importlib

    app = typer.Typer(no_args_is_help=True, add_completion=False, help="Change-data-capture into Delta Lake.")
    invoked = None if argv is None else next((a for a in argv if not a.startswith("-")), None)
    for name, (module, attr, help_text) in _GROUPS.items():
        real = (getattr(importlib.import_module(f"cdc_core.cli.{module}"), attr)
                if argv is None or name == invoked else None)
        if attr == "app":
            app.add_typer(real or typer.Typer(), name=name, help=help_text)
        else:
            app.command(name, help=help_text)(real or _placeholder)
    return app


def _placeholder() -> None:  # pragma: no cover - never invoked: a command is registered for real when named
    raise AssertionError("placeholder command invoked")


def main() -> None:
    """The ``cdcflow`` console script: :func:`run`, then an exit without native teardown (see process_exit)."""
    from cdc_core.process_exit import run_and_exit

    run_and_exit(run)


def run() -> None:
    """Parse ``sys.argv`` and run the command; a user's error is one line on stderr, its traceback in the log."""
    log.configure()
    app = build_app(sys.argv[1:])
    logger = log.get_logger("cdcflow.cli")
    try:
        app(standalone_mode=False)
    except CdcflowError as exc:
        logger.error("command failed", error=str(exc), exc_info=True)
        # escape: messages name config sections ("[airflow] schedule"), which rich would take for markup
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: typer's own click (typer._click), not `click`
        from typer import rich_utils

        rich_utils.rich_format_error(exc)  # type: ignore[arg-type]  # nothing for no args: help is shown
        sys.exit(int(getattr(exc, "exit_code", 2)))
    except Exception as exc:
        logger.error("unexpected failure", error=str(exc), exc_info=True)
        err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {escape(str(exc))} "
                          "(traceback in the cdcflow log)")
        sys.exit(1)


if __name__ == "__main__":
    main()
