"""The SQL front's tests' shared fixture: ``conn``, a PyMySQL connection (autocommit) to the session's upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql
import pytest


@pytest.fixture
def conn(upstream_cluster: Any) -> Iterator[Any]:
    host, _, port = upstream_cluster.mysql_addr.rpartition(":")
    c = pymysql.connect(host=host, port=int(port), user="root", autocommit=True)
    yield c
    c.close()
