"""The embedded upstream's partition DDL that changes which key ranges hold a table's rows.

TiDB's ActionExchangeTablePartition, ActionReorganizePartition, ActionAlterTablePartitioning and
ActionRemovePartitioning (``pkg/ddl/partition.go``). None of them changes a table's rows as SQL sees them; what
changes is the physical ids their keys are under, and no row event says so:

* EXCHANGE PARTITION moves no key: the partition's range passes to the normal table and the normal table's to the
  partition (their ids swap).
* REORGANIZE PARTITION, PARTITION BY and REMOVE PARTITIONING copy the rows into new physical tables (new
  partition ids; PARTITION BY and REMOVE PARTITIONING a new table id too) in a backfill committed before the job,
  the same keys' handles and values; the old ranges are then dropped by delete-range, which TiKV's change feed does
  not see (here they are left unreachable). A puller sees the backfill as puts under ids the table does not have
  until the job's commit ts.
* ADD PARTITION and COALESCE PARTITION of a HASH or KEY table are such a reorganization of every partition into
  the new number of them (``pkg/ddl/executor.go`` hashPartitionManagement: ActionReorganizePartition), since every
  row's partition depends on the count.

ADD / DROP / TRUNCATE PARTITION of RANGE and LIST tables are ordinary ALTER TABLE changes
(``DdlExecutor.partition_change``).
"""

from __future__ import annotations

from dataclasses import replace

from cdc_core.codec import key as keycodec
from cdc_core.codec.datum_key import index_entry_key
from cdc_core.codec.row import encode_values
from cdc_core.schema.model import TableInfo
from cdc_core.schema.partition import HASH, KEY, LIST, RANGE, PartitionDef, PartitionError
from cdc_core.schema.partition_rule import PartitionRule, rule_of
from cdc_core.upstream.pd.regions import table_split_keys
from cdc_core.upstream.sql.ddl.executor import DdlExecutor, partition_info, validated_partitions
from cdc_core.upstream.sql.ddl.partition_clause import PartitionSpec, build_definitions
from cdc_core.upstream.sql.errors import ErrorKind, SqlError
from cdc_core.upstream.sql.table_writer import index_value, read_rows
from cdc_core.upstream.sql.txn import Transaction

REORGANIZE = "alter table reorganize partition"
PARTITION_BY = "alter table partition by"
REMOVE_PARTITIONING = "alter table remove partitioning"


def _table(ex: DdlExecutor, db: str, name: str) -> TableInfo:
    ex._check_user_db(db)
    info = ex.catalog.table(db, name)
    if info is None:
        raise SqlError(f"Table '{db}.{name}' doesn't exist", ErrorKind.NOT_FOUND)
    return info


def _shape(info: TableInfo) -> tuple[object, ...]:
    """What two tables must share to exchange a partition: columns (ids, names, types, nullability, order) and
    indexes (ids, columns, kinds), and the handle (TiDB's ``checkTableDefCompatible``; ids too, since the rows and
    index entries that change tables are read by them)."""
    cols = tuple((c.id, c.name.lower(), c.sql_type.lower(), c.nullable) for c in info.columns)
    ixs = tuple(sorted((ix.id, tuple(c.lower() for c in ix.columns), ix.unique, ix.primary) for ix in info.indexes))
    return cols, ixs, info.pk_is_handle, info.is_common_handle


def exchange_partition(ex: DdlExecutor, db_name: str, name: str, partition: str, nt_db: str, nt_name: str,
                       with_validation: bool, query: str) -> int:
    """``ALTER TABLE pt EXCHANGE PARTITION p WITH TABLE nt [WITH | WITHOUT VALIDATION]``: no row moves, the two key
    ranges swap owners -- the partition takes the normal table's id and the normal table the partition's. The
    tables must have the same columns and indexes (ids included: rows and index entries are read by them); WITH
    VALIDATION (the default) refuses a normal-table row the partition could not hold, and is refused for a KEY
    table, whose rule TiDB does not check (``checkExchangePartitionRecordValidation``). The job is the normal
    table's, the partitioned table in its args (``pkg/ddl/executor.go`` ExchangeTablePartition)."""
    pt, nt = _table(ex, db_name, name), _table(ex, nt_db, nt_name)
    part = pt.partition
    if part is None:
        raise SqlError("Partition management on a not partitioned table is not possible")
    if nt.partition is not None:
        raise SqlError(f"Table to exchange with partition is partitioned: '{nt.name}'")
    gone = part.find(partition)
    if gone is None:
        raise SqlError(f"Unknown partition '{partition}' in table '{pt.name}'")
    if _shape(pt) != _shape(nt):
        raise SqlError("Tables have different definitions")
    txn = Transaction(ex.store, ex.tso)
    if with_validation:
        if part.type == KEY:
            raise SqlError(f"Unsupported partition type of table {pt.name} when exchanging partition")
        rule = _rule(pt)
        for row in read_rows(txn, nt):
            try:
                found = rule.locate(row.values).id
            except PartitionError:
                found = None
            if found != gone.id:
                raise SqlError("Found a row that does not match the partition", ErrorKind.CONSTRAINT)
    job = ex._job("exchange partition", query, schema_id=pt.db_id, table_id=pt.id, schema_name=pt.db_name,
                  table_name=pt.name, old_schema_id=nt.db_id, old_table_id=nt.id, old_schema_name=nt.db_name,
                  old_table_name=nt.name, partition_id=gone.id, partition_name=gone.name,
                  with_validation=with_validation)
    defs = tuple(replace(d, id=nt.id) if d.id == gone.id else d for d in part.definitions)
    pt_after = replace(pt, partition=replace(part, definitions=defs), schema_version=job.schema_version)
    nt_after = replace(nt, id=gone.id, schema_version=job.schema_version)
    job = replace(job, table_info=pt_after)
    # Both tables' rows now come from both allocators: later _tidb_rowids go above all of them.
    next_row = max(ex.catalog.next_row_id(pt.id), ex.catalog.next_row_id(nt.id))

    def apply() -> None:
        ex.catalog.replace_tables([(pt.id, pt_after), (nt.id, nt_after)])
        for table_id in (pt.id, nt_after.id):
            ex.catalog.rebase_row_id(table_id, next_row - 1)

    return ex._commit_job(job, apply, txn)


def _rule(info: TableInfo) -> PartitionRule:
    assert info.partition is not None
    try:
        return rule_of(info.partition, info.columns)
    except PartitionError as exc:
        raise SqlError(str(exc)) from exc


def reorganize_partition(ex: DdlExecutor, db_name: str, name: str, names: tuple[str, ...], spec: PartitionSpec,
                         query: str) -> int:
    """``ALTER TABLE t REORGANIZE PARTITION p, q INTO (PARTITION ..., ...)`` on a RANGE or LIST table (TiDB's
    ``ReorganizePartitions`` / ``getReplacedPartitionIDs`` / ``checkReorgPartitionDefs``): the named partitions are
    replaced by the new definitions under new ids -- for RANGE adjacent ones, in their place, ending where they
    ended unless the last partition is among them; for LIST at the first one's place. Every row the old ones held
    must find a new one ("Table has no partition for value ...")."""
    info = _table(ex, db_name, name)
    part = info.partition
    if part is None:
        raise SqlError("Partition management on a not partitioned table is not possible")
    if part.type not in (RANGE, LIST):
        raise SqlError("Unsupported reorganize partition")
    positions = []
    for n in names:
        d = part.find(n)
        if d is None:
            raise SqlError("Incorrect partition name")
        pos = part.definitions.index(d)
        if pos in positions:
            raise SqlError(f"Duplicate partition name {n}")
        positions.append(pos)
    first, last = min(positions), max(positions)
    if part.type == RANGE and len(positions) != last - first + 1:
        raise SqlError("Unsupported REORGANIZE PARTITION of RANGE; not adjacent partitions")
    new_defs = build_definitions(spec, info, part.columns, [ex.catalog.alloc_id() for _ in spec.names],
                                 part.by_columns)
    kept = [d for i, d in enumerate(part.definitions) if i not in positions]
    defs = (*kept[:first], *new_defs, *kept[first:])  # every partition before the first replaced one is kept
    new_part = validated_partitions(replace(part, definitions=defs), info)
    if part.type == RANGE and last != len(part.definitions) - 1 and \
            not _rule(replace(info, partition=new_part)).same_bound(new_defs[-1], part.definitions[last]):
        raise SqlError("VALUES LESS THAN value must be strictly increasing for each partition")
    moved = {part.definitions[i].id for i in positions}
    return _repartition(ex, info, replace(info, partition=new_part), moved, REORGANIZE, query)


def add_hash_partitions(ex: DdlExecutor, db_name: str, name: str, spec: PartitionSpec, query: str) -> int:
    """``ALTER TABLE t ADD PARTITION PARTITIONS n`` / ``ADD PARTITION (PARTITION a, ...)`` on a HASH or KEY table:
    every partition is reorganized into the old count plus the new ones (``hashPartitionManagement``; the old
    partitions keep their names, new ones are ``p<i>`` unless named, ``buildHashPartitionDefinitions``)."""
    info = _table(ex, db_name, name)
    part = info.partition
    if part is None:
        raise SqlError("Partition management on a not partitioned table is not possible")
    old = [d.name for d in part.definitions]
    added = [f"p{i}" for i in range(len(old), len(old) + len(spec.names))] if spec.counted else list(spec.names)
    return _rehash(ex, info, old + added, query)


def coalesce_partitions(ex: DdlExecutor, db_name: str, name: str, count: int, query: str) -> int:
    """``ALTER TABLE t COALESCE PARTITION n`` on a HASH or KEY table: every partition reorganized into ``n`` fewer
    (``CoalescePartitions`` / ``hashPartitionManagement``), the first ones' names kept."""
    info = _table(ex, db_name, name)
    part = info.partition
    if part is None:
        raise SqlError("Partition management on a not partitioned table is not possible")
    if part.type not in (HASH, KEY):
        # dbterror.ErrCoalesceOnlyOnHashPartition is raised without its argument: TiDB's text keeps the verb
        raise SqlError("%-.64s PARTITION can only be used on HASH/KEY partitions")
    if count < 1:
        raise SqlError("At least one partition must be coalesced")
    if count >= len(part.definitions):
        raise SqlError("Cannot remove all partitions, use DROP TABLE instead")
    return _rehash(ex, info, [d.name for d in part.definitions[: len(part.definitions) - count]], query)


def _rehash(ex: DdlExecutor, info: TableInfo, names: list[str], query: str) -> int:
    """Every partition of HASH/KEY table ``info`` reorganized into partitions ``names`` under new ids."""
    part = info.partition
    assert part is not None
    defs = tuple(PartitionDef(ex.catalog.alloc_id(), n) for n in names)
    new_part = validated_partitions(replace(part, definitions=defs), info)
    return _repartition(ex, info, replace(info, partition=new_part), set(part.ids), REORGANIZE, query)


def partition_by(ex: DdlExecutor, db_name: str, name: str, spec: PartitionSpec | None, query: str) -> int:
    """``ALTER TABLE t PARTITION BY ...`` (``spec``) or ``ALTER TABLE t REMOVE PARTITIONING`` (None): the table is
    rebuilt under a new table id (TiDB's ``PartitionInfo.NewTableID``) with new partition ids, every row copied."""
    info = _table(ex, db_name, name)
    if spec is None and info.partition is None:
        raise SqlError("Partition management on a not partitioned table is not possible")
    new_id = ex.catalog.alloc_id()
    after = replace(info, id=new_id, partition=None)
    if spec is not None:
        after = replace(after, partition=partition_info(after, spec, [ex.catalog.alloc_id() for _ in spec.names]))
    job_type = PARTITION_BY if spec is not None else REMOVE_PARTITIONING
    return _repartition(ex, info, after, set(info.physical_ids), job_type, query)


def _repartition(ex: DdlExecutor, before: TableInfo, after: TableInfo, moved: set[int], job_type: str,
                 query: str) -> int:
    """Copy the rows of the physical tables ``moved`` to where ``after`` puts them (row keys and unique-index
    entries under the new ids, handles and values unchanged) in a backfill committed before the job; then the job,
    with TiDB's finished args (the old physical ids, for delete-range)."""
    backfill = Transaction(ex.store, ex.tso)
    rule = _rule(after) if after.partition is not None else None
    new_ids = set(after.physical_ids) - set(before.physical_ids)
    for row in read_rows(backfill, before):
        if row.physical_id not in moved:
            continue
        pid = after.id
        if rule is not None:
            try:
                pid = rule.locate(row.values).id
            except PartitionError as exc:
                raise SqlError(str(exc), ErrorKind.CONSTRAINT) from exc
            if pid not in new_ids:  # a reorganized partition's row that no new definition takes
                raise SqlError(_no_partition_text(rule, row.values), ErrorKind.CONSTRAINT)
        backfill.put(keycodec.record_key(pid, row.handle), encode_values(after, row.values))
        for ix in after.indexes:
            if (ix.unique or ix.primary) and not (ix.primary and after.clustered):
                k = index_entry_key(after, ix, row.values, pid)
                if k is not None:
                    backfill.put(k, index_value(row.handle))
    job = ex._job(job_type, query, schema_id=before.db_id, table_id=after.id, schema_name=before.db_name,
                  table_name=before.name, old_table_id=before.id if after.id != before.id else None,
                  old_physical_ids=tuple(sorted(moved)))
    after = replace(after, schema_version=job.schema_version)
    job = replace(job, table_info=after)
    next_row = ex.catalog.next_row_id(before.id)
    for pid in new_ids:
        ex.regions.split(table_split_keys(pid, ex.regions_per_table))
    # The backfill commits before the job, in the same event-loop step: no other transaction commits between them.
    backfill.commit_now()

    def apply() -> None:
        ex.catalog.replace_table(before.id, after)
        ex.catalog.rebase_row_id(after.id, next_row - 1)

    return ex._commit_job(job, apply)


def _no_partition_text(rule: PartitionRule, values: dict[str, object]) -> str:
    """TiDB's 1526 text for a row no new partition takes: its value for an expression, ``from column_list`` for a
    column list."""
    if rule.part.by_columns:
        return "Table has no partition for value from column_list"
    v = values.get(rule.columns[0].name)
    return f"Table has no partition for value {'NULL' if v is None else v}"
