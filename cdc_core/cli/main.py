"""Entry point of ``cdcflow``: registers the command groups and turns errors into clean messages."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from cdc_core import log
from cdc_core.errors import CdcflowError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Change-data-capture into Delta Lake.")
err_console = Console(stderr=True)


_registered = False


def _register_once() -> None:
    """Attach the command groups once (the CLI entry point and in-process tests both call it)."""
    global _registered
    if _registered:
        return
    _registered = True
    from cdc_core.cli import changefeed_cmd, tso_cmd, upstream_cmd, verify_cmd

    app.add_typer(upstream_cmd.app, name="upstream", help="Run and drive the embedded upstream cluster.")
    app.add_typer(changefeed_cmd.app, name="changefeed", help="Create, run and inspect changefeeds.")
    app.add_typer(tso_cmd.app, name="tso", help="TSO timestamps.")
    app.command("verify")(verify_cmd.verify)


def main() -> None:
    log.configure()
    _register_once()
    logger = log.get_logger("cdcflow.cli")
    try:
        app(standalone_mode=False)
    except CdcflowError as exc:
        logger.error("command failed", error=str(exc), exc_info=True)
        err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors and anything unexpected
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        logger.error("unexpected failure", error=str(exc), exc_info=True)
        err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {exc} (traceback in the cdcflow log)")
        sys.exit(1)


if __name__ == "__main__":
    main()
