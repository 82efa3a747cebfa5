"""The log file shared by every process of a home: processes writing and rotating it at once lose no line and
split none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LINES = 1500

_WRITER = """
import logging, sys
from pathlib import Path
from cdc_core.log import file_handler
h = file_handler(Path(sys.argv[1]), max_bytes=16 << 10, backups=200)
log = logging.getLogger("w"); log.addHandler(h); log.setLevel(logging.INFO)
for i in range(%d):
    log.info("writer=%%s line=%%05d %%s", sys.argv[2], i, "x" * 60)
"""


def test_processes_rotating_one_log_lose_no_line(tmp_path: Path) -> None:
    log = tmp_path / "cdcflow.log"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER % LINES, str(log), name]) for name in ("a", "b", "c")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    files = sorted(tmp_path.glob("cdcflow.log*"))
    assert len(files) > 3  # it rotated, many times, under three writers
    lines = [line for f in files for line in f.read_text().splitlines()]
    assert len(lines) == 3 * LINES
    for name in ("a", "b", "c"):
        mine = sorted(int(line.split("line=")[1][:5]) for line in lines if line.startswith(f"writer={name} "))
        assert mine == list(range(LINES)), name  # each line once, whole
