"""The soak's imports: its chaos module beside it, and the end-to-end harnesses (topology, Airflow feed)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
