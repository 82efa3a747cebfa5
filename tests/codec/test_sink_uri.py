from pathlib import Path

import pytest

from cdc_core.codec.sink_uri import local_path


def test_file_uris_and_bare_paths_are_local_directories() -> None:
    assert local_path("file:///lake/cf") == Path("/lake/cf")
    assert local_path("/lake/cf") == Path("/lake/cf")


def test_remote_sinks_are_refused_by_the_embedded_engine() -> None:
    with pytest.raises(ValueError, match="only file:// sinks"):
        local_path("s3://b/x")
