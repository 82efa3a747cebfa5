"""cdc_core.process_exit: the exit status, the atexit handlers and the flushed output of a process that ends
without the native teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = "import atexit, sys\nfrom cdc_core.process_exit import run_and_exit\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_status_is_what_the_interpreter_would_give() -> None:
    assert _run("run_and_exit(lambda: None)").returncode == 0
    assert _run("run_and_exit(lambda: 3)").returncode == 3
    assert _run("def m():\n    sys.exit(4)\nrun_and_exit(m)").returncode == 4
    msg = _run("def m():\n    sys.exit('no such changefeed')\nrun_and_exit(m)")
    assert msg.returncode == 1 and msg.stderr.strip() == "no such changefeed"
    crash = _run("def m():\n    raise KeyError('k')\nrun_and_exit(m)")
    assert crash.returncode == 1
    assert "Traceback" in crash.stderr and "KeyError: 'k'" in crash.stderr


def test_atexit_handlers_run_and_piped_output_is_flushed() -> None:
    # stdout to a pipe is block-buffered: without the flush, os._exit would drop both lines.
    proc = _run("""
        atexit.register(lambda: print("handler ran"))
        def m():
            print("work done")
            return 0
        run_and_exit(m)
    """)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["work done", "handler ran"]


def test_module_teardown_is_skipped() -> None:
    # A finalizer run only by interpreter teardown stands for the native destructors that abort.
    proc = _run("""
        class Pool:
            def __del__(self):
                print("torn down")
        pool = Pool()
        run_and_exit(lambda: 0)
    """)
    assert proc.returncode == 0 and "torn down" not in proc.stdout
    control = "class P:\n    def __del__(self):\n        print('torn down')\np = P()"
    plain = subprocess.run([sys.executable, "-c", control], capture_output=True, text=True, timeout=60)
    assert "torn down" in plain.stdout  # the control: a plain exit does run it


def test_the_spark_job_entry_points_exit_through_it() -> None:
    for job in ("apply_window", "ddl_apply", "snapshot_load", "checks.data_quality"):
        ok = subprocess.run([sys.executable, "-m", f"spark_jobs.{job}", "--help"], capture_output=True, text=True,
                            timeout=120)
        assert ok.returncode == 0 and "usage:" in ok.stdout, (job, ok.stderr)
        bad = subprocess.run([sys.executable, "-m", f"spark_jobs.{job}", "--no-such-flag"], capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2 and "error:" in bad.stderr, (job, bad.stderr)


def test_non_daemon_threads_are_joined_first() -> None:
    proc = _run("""
        import threading, time
        def work():
            time.sleep(0.2)
            print("thread finished")
        def m():
            threading.Thread(target=work).start()
            return 0
        run_and_exit(m)
    """)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["thread finished"]
