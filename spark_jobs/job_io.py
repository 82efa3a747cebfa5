"""The spark-submit protocol of cdcflow's jobs: JSON arguments in, JSON result out.

``cdc_core.changefeed.spark_engine`` runs ``spark-submit <job>.py --args FILE --result FILE``;
each job's ``main`` reads its arguments and writes its result through these two functions.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def read_args(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        args: dict[str, Any] = json.load(f)
    return args


def write_result(result: dict[str, Any], path: str | None) -> None:
    """Write the result JSON to ``path``, or to stdout when no path is given."""
    text = json.dumps(result, sort_keys=True)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")
