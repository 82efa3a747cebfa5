"""The sink's layout: local paths of sink URIs, and the one encoding of upstream names into lake path components
(cdc_core.codec.sink_uri): names of safe characters keep the path they always had, every other name is encoded
reversibly into one component that stays inside its directory, and what cannot be made safe is refused."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cdc_core.codec.sink_uri import (
    CDCFLOW_DIR,
    MAX_COMPONENT_BYTES,
    RESERVED_COLUMNS,
    check_lake_names,
    component_name,
    database_path,
    local_path,
    name_component,
    qualified_name_of,
    snapshot_component,
    table_path,
    table_path_of,
)
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, TableInfo

# What TiDB takes as a name (util.IsInCorrectIdentifierName: not empty, no trailing space; 64 characters at most,
# mysql.MaxTableNameLength): any Unicode text but lone surrogates, which no UTF-8 name holds.
names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=64).filter(
    lambda n: not n.endswith(" "))


def _unescape(text: str) -> str:
    return re.sub(rb"~([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), text.encode()).decode()


def test_file_uris_and_bare_paths_are_local_directories() -> None:
    assert local_path("file:///lake/cf") == Path("/lake/cf")
    assert local_path("/lake/cf") == Path("/lake/cf")


def test_remote_sinks_are_refused_by_the_embedded_engine() -> None:
    with pytest.raises(ValueError, match="only file:// sinks"):
        local_path("s3://b/x")


def test_names_of_safe_characters_keep_the_path_they_always_had() -> None:
    """Existing lakes keep working: letters and digits of any script, _ - $ . stay as they are."""
    for name in ("orders", "Order_Items-2024", "t$1", "a.b", "中文表", "über", "x_", "_t_gho"):
        assert name_component(name) == name
    assert table_path_of("file:///lake", "shop", "orders") == "/lake/shop/orders"
    assert table_path_of("/lake", "shop", "a.b") == "/lake/shop/a.b"
    assert table_path_of("s3://bucket/lake/", "shop", "t") == "s3://bucket/lake/shop/t"
    assert database_path("file:///lake", "shop") == "/lake/shop"


def test_other_characters_are_percent_encoded_as_utf8() -> None:
    assert name_component("a/b") == "a~2Fb"
    assert name_component("a b") == "a~20b"
    assert name_component("50%") == "50~25" and name_component("~") == "~7E"
    assert name_component("x`y'z\"\\") == "x~60y~27z~22~5C"
    assert name_component("a\0b\n") == "a~00b~0A"
    assert name_component("t😀") == "t~F0~9F~98~80"  # a symbol, not a letter: its four UTF-8 bytes
    assert name_component("@1") == "~401"  # a dropped copy is <table>@<ts>: no table's component holds an @


def test_no_name_leaves_its_directory_or_takes_cdcflows() -> None:
    assert name_component(".") == "~2E" and name_component("..") == "~2E." and name_component(".x") == "~2Ex"
    assert name_component("../../etc", database=True) == "~2E.~2F..~2Fetc"  # one component, its slashes encoded
    # cdcflow's own directory, and every other internal "_" one, is no database's
    assert name_component(CDCFLOW_DIR, database=True) == "~5Fcdcflow"
    assert name_component("_CDCFLOW", database=True) == "~5FCDCFLOW"
    assert name_component("_x", database=True) == "~5Fx" and name_component("x_", database=True) == "x_"
    # a table called _delta_log would be its database directory's Delta log
    assert name_component("_delta_log") == "~5Fdelta_log" and name_component("_Delta_Log") == "~5FDelta_Log"
    assert name_component("_delta_log", database=True) == "~5Fdelta_log"
    assert table_path_of("file:///lake", "_cdcflow", "changelog") == "/lake/~5Fcdcflow/changelog"


@given(names, st.booleans())
@example("_cdcflow", True)
@example("..", False)
@example("~2F", False)
@example("_delta_log", False)
def test_every_name_is_one_component_that_reads_back_as_the_name(name: str, database: bool) -> None:
    component = name_component(name, database=database)
    assert component_name(component, database=database) == name
    assert "/" not in component and "\0" not in component and component not in (".", "..")
    assert not component.startswith(".") and not (database and component.startswith("_"))
    assert component.lower() != "_delta_log"
    assert len(component.encode()) <= MAX_COMPONENT_BYTES
    assert os.path.dirname(os.path.join("/lake", component)) == "/lake"


@given(names, names)
def test_two_names_never_share_a_component(a: str, b: str) -> None:
    if a != b:
        assert name_component(a) != name_component(b)
        assert snapshot_component(a, b) != snapshot_component(b, a)


@given(names, names)
def test_a_snapshot_base_is_one_component_whose_only_dot_separates_the_names(db: str, table: str) -> None:
    component = snapshot_component(db, table)
    assert "/" not in component and not component.startswith((".", "_"))
    # room for the temporary name a base is written under first: .tmp-<component>-<32 hex>
    assert len(f".tmp-{component}-{'0' * 32}".encode()) <= MAX_COMPONENT_BYTES
    if not re.search("~[0-9a-f]{32}$", component):  # not cut short (then a digest of the names ends it)
        d, t = component.split(".")
        assert (_unescape(d), _unescape(t)) == (db, table)


def test_snapshot_bases_of_dotted_names_do_not_collide() -> None:
    assert snapshot_component("shop", "orders") == "shop.orders"  # as before
    assert snapshot_component("a.b", "c") == "a~2Eb.c" != snapshot_component("a", "b.c") == "a.b~2Ec"


def test_a_component_cdcflow_did_not_write_is_not_read_as_a_name() -> None:
    for component in ("a b", "a~2fb", "~5", "_x", "..", "~2F~", "~FF", "a%2Fb"):
        with pytest.raises(ValueError):
            component_name(component, database=True)
    assert component_name("a~2Fb") == "a/b"
    assert qualified_name_of("~5Fcdcflow", "a~20b") == "_cdcflow.a b"
    assert qualified_name_of("shop", "not canonical") == "shop.not canonical"  # shown as it is


def _table(db: str, name: str, *columns: str) -> TableInfo:
    return TableInfo(id=42, db_name=db, name=name,
                     columns=tuple(Column(i, c, "int") for i, c in enumerate(columns or ("a",), 1)))


def test_table_path_is_the_encoded_names() -> None:
    assert table_path("file:///lake", _table("we`ird db", "t/1")) == "/lake/we~60ird~20db/t~2F1"


def test_names_the_lake_cannot_hold_are_refused_with_the_table_named() -> None:
    check_lake_names(_table("_cdcflow", "a b.c", "k`ey", "v a=l;u{e}", "x\n"))  # all of these are held
    long = "😀" * 64  # 768 bytes once encoded: no file system takes such a component
    with pytest.raises(ChangefeedError) as err:
        check_lake_names(_table("shop", long))
    assert "'shop." in str(err.value) and "more than the 255" in str(err.value)
    with pytest.raises(ChangefeedError, match="NUL"):
        check_lake_names(_table("shop", "t", "a\0b"))
    with pytest.raises(ChangefeedError, match="_CDC_OP"):
        check_lake_names(_table("shop", "t", "_CDC_OP"))
    assert "_cdc_op" in RESERVED_COLUMNS
    with pytest.raises(ChangefeedError, match="empty"):
        name_component("")


def test_the_reserved_columns_are_the_ones_the_change_sets_add() -> None:
    from spark_jobs.normalize.mapped_values import MAPPED_COL
    from spark_jobs.normalize.net_effect import COMMIT_TS_COL, OP_COL

    assert set(RESERVED_COLUMNS) == {OP_COL, COMMIT_TS_COL, MAPPED_COL}

