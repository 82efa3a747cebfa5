from __future__ import annotations

import dataclasses

import pytest

from cdc_core.errors import ConfigError
from cdc_core.memory import MIB, MemoryLimitConfig


def test_defaults_are_the_seeds() -> None:
    c = MemoryLimitConfig()
    assert (c.heap_limit_bytes, c.direct_limit_bytes) == (100 * MIB, 100 * MIB)
    assert (c.heap_acquire_timeout_ms, c.direct_acquire_timeout_ms) == (25_000, 25_000)
    assert (c.heap_max_queue, c.direct_max_queue) == (1000, 1000)
    assert MemoryLimitConfig.from_mapping({}, "x") == c


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        MemoryLimitConfig().heap_limit_bytes = 1  # type: ignore[misc]


def test_from_mapping_reads_every_key_and_shared_keys_are_overridden_by_specific_ones() -> None:
    c = MemoryLimitConfig.from_mapping(
        {
            "heap-limit-bytes": 1,
            "direct-limit-bytes": 0,
            "acquire-timeout-ms": 7,
            "max-queue": 3,
            "direct-acquire-timeout-ms": 0,
            "heap-max-queue": 9,
        },
        "changefeed.toml [memory]",
    )
    assert c == MemoryLimitConfig(1, 0, 7, 0, 9, 3)
    assert MemoryLimitConfig.from_mapping(c.to_mapping(), "x") == c


def test_unknown_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(
        ConfigError, match=r"cf\.toml \[memory\]: unknown key 'heap-limit' \(did you mean 'heap-limit-bytes'"
    ):
        MemoryLimitConfig.from_mapping({"heap-limit": 1}, "cf.toml [memory]")
    with pytest.raises(ConfigError, match="known keys: acquire-timeout-ms"):
        MemoryLimitConfig.from_mapping({"zzz": 1}, "m")


@pytest.mark.parametrize("value", [-1, 1.5, "100MiB", True, None])
def test_bad_values_name_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"m: 'max-queue' must be an integer >= 0 \(0 disables\)"):
        MemoryLimitConfig.from_mapping({"max-queue": value}, "m")


def test_direct_construction_is_validated_and_disabled_is_all_zero() -> None:
    with pytest.raises(ConfigError, match="heap_max_queue"):
        MemoryLimitConfig(heap_max_queue=-1)
    with pytest.raises(ConfigError, match="expected a table"):
        MemoryLimitConfig.from_mapping([], "m")  # type: ignore[arg-type]
    assert set(dataclasses.astuple(MemoryLimitConfig.disabled())) == {0}
