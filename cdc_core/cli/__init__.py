"""The ``cdcflow`` command line (typer): one module per command group."""
