"""How cdcflow's own processes end: Python's exit handlers, flushed output, then no native teardown.

A process that has read Delta through pyarrow (deltalake's ``to_pyarrow_*``, a dataset scan) can abort at
interpreter shutdown *after* its work is done: Arrow's C++ thread pool may still own a joinable
``std::thread`` when the C++ static destructors run, libstdc++ calls ``std::terminate`` ("terminate called
without an active exception") and a job that committed exits 134 (SIGABRT) with its buffered stdout lost
(apache/arrow#34314, delta-rs#2184; seen here as a failed ``make demo`` whose Delta commits were all in
place). A finished process has nothing left for that teardown to do, so :func:`run_and_exit` runs the
entry point, then what an orderly exit runs on the Python side — joining non-daemon threads, the ``atexit``
handlers (``logging.shutdown``, pyspark's gateway shutdown), the stdio flush — and leaves with
:func:`os._exit`, skipping the native destructors. Only ``__main__`` blocks and the console script call it:
in-process callers (tests) call the entry points themselves.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def exit_code(main: Callable[[], int | None]) -> int:
    """Run ``main`` as the interpreter would run a script: its return value, ``sys.exit`` or an uncaught exception
    (printed by ``sys.excepthook``) become the process's exit status."""
    try:
        result = main()
    except SystemExit as exc:
        return _status(exc.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return _status(result)


def run_and_exit(main: Callable[[], int | None]) -> NoReturn:
    """Run ``main``, then end the process without the native teardown (see the module docstring)."""
    code = exit_code(main)
    # What Py_FinalizeEx runs first, in its order: join the non-daemon threads, then the atexit handlers. The
    # rest (module teardown, C++ static destructors) is what os._exit skips.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): printed, status 1, as the interpreter does
    return 1
