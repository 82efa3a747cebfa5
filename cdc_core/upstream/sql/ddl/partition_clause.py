"""The ``PARTITION BY`` clause of ``CREATE TABLE`` / ``ALTER TABLE``, read apart from the rest of the statement, and
the partitions it gives a table.

sqlglot parses little of MySQL's partitioning (not ``RANGE ... VALUES LESS THAN MAXVALUE``, not ``HASH ...
PARTITIONS n``, not COLUMNS or KEY), so the SQL front cuts the clause off the statement (at parenthesis depth 0,
outside literals) and it is read here from sqlglot's MySQL tokens, as TiDB's parser takes it (``pkg/parser/parser.y``
PartitionOpt)::

    PARTITION BY [LINEAR] HASH (col) [PARTITIONS n] [(PARTITION p, ...)]
    PARTITION BY [LINEAR] KEY [ALGORITHM = n] ([col, ...]) [PARTITIONS n] [(PARTITION p, ...)]
    PARTITION BY RANGE (col) | RANGE COLUMNS (col, ...)
        (PARTITION p VALUES LESS THAN (v, ...) | MAXVALUE, ...)
    PARTITION BY LIST (col) | LIST COLUMNS (col, ...)
        (PARTITION p VALUES IN (v, ... | (v, ...), ...) | DEFAULT, ...)

An expression partitioning is over one column here (``HASH(YEAR(d))`` is refused naming it); values are literals
(integers, strings, ``X'..'``/``_binary '..'``, NULL, MAXVALUE, DEFAULT). LINEAR is parsed and, as in TiDB, ignored
with a warning ("LINEAR KEY is not supported, using non-linear KEY instead", ``buildTablePartitionInfo``). Then
:func:`build_partitions` checks the clause against the table as TiDB's ``buildTablePartitionInfo`` /
``checkPartitioningKeysConstraints`` do (the columns exist and have a type the partitioning takes, every unique key
holds them, KEY() is the primary key's columns) and writes each bound as TiDB stores it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from cdc_core.log import get_logger
from cdc_core.schema import partition_rule
from cdc_core.schema.model import SchemaError, TableInfo
from cdc_core.schema.partition import (
    DEFAULT,
    HASH,
    KEY,
    LIST,
    MAXVALUE,
    NULL,
    RANGE,
    TYPE_NAMES,
    PartitionDef,
    PartitionError,
    PartitionInfo,
)
from cdc_core.upstream.sql.errors import SqlError

__all__ = ["Maxvalue", "PartitionSpec", "build_definitions", "build_partitions", "cut_partition_clause",
           "parse_added_partitions", "parse_partition_clause"]

log = get_logger("cdcflow.upstream.partition")


class _Word:
    def __init__(self, word: str) -> None:
        self.word = word

    def __repr__(self) -> str:
        return self.word


Maxvalue: Final = _Word(MAXVALUE)  # VALUES LESS THAN (MAXVALUE)
Default: Final = _Word(DEFAULT)  # LIST's PARTITION p DEFAULT / VALUES IN (DEFAULT)


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed clause: the partitions get their ids (and their bounds' texts, from the column types) when the
    table is created (:func:`build_partitions`). ``less_than``/``in_values`` hold literals: ``int``, ``str``,
    ``bytes``, ``Decimal``, None for NULL, :data:`Maxvalue`, :data:`Default`."""

    type: int
    columns: tuple[str, ...]  # KEY(): empty, the primary key's
    names: tuple[str, ...]
    by_columns: bool = False
    less_than: tuple[tuple[Any, ...], ...] = ()  # RANGE, per partition: one literal per column
    in_values: tuple[tuple[tuple[Any, ...], ...], ...] = ()  # LIST, per partition: value tuples
    linear: bool = False
    counted: bool = field(default=False, compare=False)  # HASH/KEY: PARTITIONS n given, names not

    @property
    def method(self) -> str:
        return TYPE_NAMES[self.type]


def cut_partition_clause(text: str) -> tuple[str, str | None]:
    """``text`` without its top-level ``PARTITION BY ...`` clause, and the clause (None when there is none)."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch in "pP":
            m = re.compile(r"PARTITION\s+BY\b", re.IGNORECASE).match(text, i)
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                return text[:i].rstrip(), text[i:].strip()
        i += 1
    return text, None


class _Tokens:
    """A cursor over the clause's MySQL tokens; every error names the clause."""

    # Tokens that cannot be a column or partition name (a keyword can be one: a column named `date` is DATE).
    NOT_NAMES = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.NUMBER, TokenType.HEX_STRING,
                           TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA, TokenType.DASH, TokenType.PLUS})

    def __init__(self, clause: str) -> None:
        self.clause = clause
        try:
            self.toks: list[Token] = MySQL().tokenize(clause)
        except TokenError as exc:
            raise SqlError(f"partitioning `{clause}`: syntax error: {exc}") from exc
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def error(self, what: str) -> SqlError:
        tok = self.peek()
        near = f" near {tok.text!r}" if tok is not None else " at its end"
        return SqlError(f"unsupported partitioning `{self.clause}`: {what}{near}")

    def word(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        return "" if tok is None or tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER) else tok.text.upper()

    def accept(self, *words: str) -> bool:
        if self.word() in words:
            self.i += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.accept(word):
            raise self.error(f"expected {word}")

    def accept_type(self, tt: TokenType) -> bool:
        tok = self.peek()
        if tok is not None and tok.token_type == tt:
            self.i += 1
            return True
        return False

    def expect_type(self, tt: TokenType, what: str) -> Token:
        tok = self.peek()
        if tok is None or tok.token_type != tt:
            raise self.error(f"expected {what}")
        self.i += 1
        return tok

    def name(self, what: str) -> str:
        tok = self.peek()
        if tok is None or tok.token_type in self.NOT_NAMES:
            raise self.error(f"expected {what}")
        self.i += 1
        return tok.text

    def number(self, what: str) -> int:
        tok = self.expect_type(TokenType.NUMBER, what)
        if not tok.text.isdigit():
            raise self.error(f"expected {what}")
        return int(tok.text)

    def done(self) -> bool:
        return self.i >= len(self.toks)


def _literal(t: _Tokens) -> Any:
    """One value of a partition definition."""
    tok = t.peek()
    if tok is None:
        raise t.error("expected a value")
    tt = tok.token_type
    if tt == TokenType.INTRODUCER:  # _binary 'ab', _utf8mb4 'ab'
        t.i += 1
        s = t.expect_type(TokenType.STRING, "a string after the character set introducer")
        return s.text.encode() if tok.text.lower() == "_binary" else s.text
    if tt in (TokenType.STRING, TokenType.NATIONAL_STRING):
        t.i += 1
        return tok.text
    if tt == TokenType.HEX_STRING:
        t.i += 1
        return bytes.fromhex(tok.text if len(tok.text) % 2 == 0 else "0" + tok.text)
    sign = 1
    if tt in (TokenType.DASH, TokenType.PLUS):
        sign = -1 if tt == TokenType.DASH else 1
        t.i += 1
        tok = t.peek()
        if tok is None or tok.token_type != TokenType.NUMBER:
            raise t.error("expected a number")
    if tok.token_type == TokenType.NUMBER:
        t.i += 1
        text = tok.text
        return sign * int(text) if text.isdigit() else sign * Decimal(text)
    word = tok.text.upper()
    simple = {"NULL": None, "TRUE": 1, "FALSE": 0, MAXVALUE: Maxvalue, DEFAULT: Default}
    if word in simple and tok.token_type != TokenType.IDENTIFIER:  # `MAXVALUE` is a name
        t.i += 1
        return simple[word]
    raise t.error("a partition value must be a literal (a number, a string, NULL, MAXVALUE)")


def _value_list(t: _Tokens) -> tuple[Any, ...]:
    t.expect_type(TokenType.L_PAREN, "(")
    out = [_literal(t)]
    while t.accept_type(TokenType.COMMA):
        out.append(_literal(t))
    t.expect_type(TokenType.R_PAREN, ")")
    return tuple(out)


def _in_values(t: _Tokens) -> tuple[tuple[Any, ...], ...]:
    """``VALUES IN (v, ...)`` or ``((v, w), ...)``: each item a value tuple."""
    t.expect_type(TokenType.L_PAREN, "(")
    items = []
    while True:
        tok = t.peek()
        items.append(_value_list(t) if tok is not None and tok.token_type == TokenType.L_PAREN else (_literal(t),))
        if not t.accept_type(TokenType.COMMA):
            break
    t.expect_type(TokenType.R_PAREN, ")")
    return tuple(items)


def _columns(t: _Tokens, allow_empty: bool) -> tuple[str, ...]:
    t.expect_type(TokenType.L_PAREN, "(")
    cols: list[str] = []
    if allow_empty and t.accept_type(TokenType.R_PAREN):
        return ()
    cols.append(t.name("a column name"))
    while t.accept_type(TokenType.COMMA):
        cols.append(t.name("a column name"))
    t.expect_type(TokenType.R_PAREN, ")")
    return tuple(cols)


def _expression_column(t: _Tokens, method: str) -> str:
    """The expression of HASH/RANGE/LIST: a column here."""
    start = t.i
    t.expect_type(TokenType.L_PAREN, "(")
    tok = t.peek()
    after = t.peek(1)
    if tok is None or after is None or after.token_type != TokenType.R_PAREN or tok.token_type in _Tokens.NOT_NAMES:
        depth, j = 0, start
        while j < len(t.toks):
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.toks[j].token_type, 0)
            j += 1
            if depth == 0:
                break
        shown = " ".join(x.text for x in t.toks[start:j])
        raise SqlError(f"unsupported partitioning `{t.clause}`: {method} by the expression {shown} (only a column "
                       "is supported here)")
    t.i += 2
    return tok.text


def _options(t: _Tokens) -> None:
    """A partition's options: COMMENT and ENGINE are taken (and not kept); anything else is refused."""
    while True:
        if t.accept("COMMENT"):
            t.accept_type(TokenType.EQ)
            t.expect_type(TokenType.STRING, "the comment")
        elif t.accept("ENGINE"):
            t.accept_type(TokenType.EQ)
            t.name("the engine")
        else:
            return


def _definitions(t: _Tokens, tp: int) -> tuple[list[str], list[Any]]:
    """``(PARTITION p ..., ...)``: the names and each one's LESS THAN / IN values (None for HASH/KEY)."""
    t.expect_type(TokenType.L_PAREN, "(")
    names: list[str] = []
    values: list[Any] = []
    while True:
        t.expect("PARTITION")
        names.append(t.name("a partition name"))
        value: Any = None
        if t.accept("VALUES"):
            if t.accept("LESS"):
                t.expect("THAN")
                if tp != RANGE:
                    raise SqlError("Only RANGE PARTITIONING can use VALUES LESS THAN in partition definition")
                value = (Maxvalue,) if t.accept(MAXVALUE) else _value_list(t)
            elif t.accept("IN"):
                if tp != LIST:
                    raise SqlError("Only LIST PARTITIONING can use VALUES IN in partition definition")
                value = _in_values(t)
            else:
                raise t.error("expected LESS THAN or IN")
        elif t.accept(DEFAULT):
            if tp != LIST:
                raise SqlError("Only LIST PARTITIONING can use VALUES IN in partition definition")
            value = ((Default,),)
        if value is None and tp in (RANGE, LIST):
            word = "LESS THAN" if tp == RANGE else "IN"
            # TiDB's parser text (pkg/parser/mysql/errname.go ErrPartitionRequiresValues) reads "Syntax :"
            raise SqlError(f"Syntax : {TYPE_NAMES[tp]} PARTITIONING requires definition of VALUES {word} for each "
                           "partition")
        if t.accept("SUBPARTITION") or t.word() == "(":
            raise SqlError("unsupported SUBPARTITION: the embedded upstream takes no subpartitions")
        _options(t)
        values.append(value)
        if not t.accept_type(TokenType.COMMA):
            break
    t.expect_type(TokenType.R_PAREN, ")")
    return names, values


def parse_partition_clause(clause: str) -> PartitionSpec:
    """The clause ``PARTITION BY ...`` as a :class:`PartitionSpec` (``SqlError`` naming the clause otherwise)."""
    t = _Tokens(clause.strip())
    if not t.accept_type(TokenType.PARTITION_BY):
        t.expect("PARTITION")
        t.expect("BY")
    linear = t.accept("LINEAR")
    method = t.word()
    tp = {"RANGE": RANGE, "HASH": HASH, "LIST": LIST, "KEY": KEY}.get(method)
    if tp is None:
        raise t.error("expected RANGE, LIST, HASH or KEY")
    t.i += 1
    if linear and tp not in (HASH, KEY):
        raise t.error("LINEAR applies to HASH and KEY")
    by_columns = tp == KEY
    if tp == KEY:
        if t.accept("ALGORITHM"):  # TiDB parses ALGORITHM = 1 | 2 and hashes the same way for both
            t.expect_type(TokenType.EQ, "=")
            t.number("the key algorithm")
        columns = _columns(t, allow_empty=True)
    elif tp in (RANGE, LIST) and t.accept("COLUMNS"):
        by_columns = True
        columns = _columns(t, allow_empty=False)
    else:
        columns = (_expression_column(t, method),)
    if linear:
        # pkg/ddl/partition.go buildTablePartitionInfo: a warning, and a non-linear partitioning.
        log.warning(f"LINEAR {method} is not supported, using non-linear {method} instead", clause=clause)
    count = None
    if t.accept("PARTITIONS"):
        count = t.number("the number of partitions")
        if count == 0:
            raise SqlError("Number of partitions = 0 is not an allowed value")
    if t.word() in ("SUBPARTITION",):
        raise SqlError("unsupported SUBPARTITION: the embedded upstream takes no subpartitions")
    names: list[str] = []
    values: list[Any] = []
    if t.peek() is not None and t.peek().token_type == TokenType.L_PAREN:  # type: ignore[union-attr]
        names, values = _definitions(t, tp)
    if not t.done():
        raise t.error("unexpected text after the partitioning")
    if tp in (HASH, KEY):
        if names and count is not None and count != len(names):
            raise SqlError("Wrong number of partitions defined, mismatch with previous setting")
        if not names:
            names = [f"p{i}" for i in range(count or 1)]  # no PARTITIONS: one partition, as MySQL and TiDB
        return PartitionSpec(tp, columns, tuple(names), by_columns, linear=linear, counted=not values)
    if not names:
        raise SqlError(f"For {method} partitions each partition must be defined")
    if tp == RANGE:
        return PartitionSpec(tp, columns, tuple(names), by_columns, less_than=tuple(values), linear=linear)
    return PartitionSpec(tp, columns, tuple(names), by_columns, in_values=tuple(values), linear=linear)


def parse_added_partitions(body: str, part: PartitionInfo) -> PartitionSpec:
    """The partitions of ``ALTER TABLE ... ADD PARTITION <body>`` (or ``REORGANIZE ... INTO <body>``), in the
    table's own partitioning ``part``: definitions, or for HASH/KEY ``PARTITIONS n``."""
    return parse_partition_clause(f"{part.clause_head()} {body}")


# --- the partitions a clause gives a table -------------------------------------------------------------------------


def _table_columns(spec: PartitionSpec, info: TableInfo) -> tuple[str, ...]:
    """The partitioning's columns by the table's names; KEY() is the primary key's (``buildTablePartitionInfo``)."""
    if spec.type == KEY and not spec.columns:
        if not info.primary_key:
            raise SqlError("Table partition metadata not correct, neither partition expression or list of "
                           "partition columns")
        return tuple(info.column(c).name for c in info.primary_key)
    out = []
    for name in spec.columns:
        try:
            out.append(info.column(name).name)
        except SchemaError:
            if spec.by_columns:
                raise SqlError("Field in list of fields for partition function not found in table") from None
            raise SqlError(f"Unknown column '{name}' in 'partition function'") from None
    lowered = [c.lower() for c in out]
    for c in lowered:
        if lowered.count(c) > 1:
            raise SqlError(f"Duplicate partition field name '{c}'")
    return tuple(out)


def _check_unique_keys(info: TableInfo, columns: tuple[str, ...]) -> None:
    """``checkPartitioningKeysConstraints``: every unique key holds every partitioning column (error 1503, naming a
    clustered key CLUSTERED INDEX)."""
    wanted = {c.lower() for c in columns}
    handle = [ix for ix in info.indexes if ix.primary and info.pk_is_handle]
    for ix in [ix for ix in info.indexes if ix not in handle] + handle:
        if not (ix.unique or ix.primary) or wanted <= {c.lower() for c in ix.columns}:
            continue
        kind = "CLUSTERED INDEX" if ix.primary and info.clustered else "PRIMARY KEY" if ix.primary else \
            "UNIQUE INDEX"
        raise SqlError(f"A {kind} must include all columns in the table's partitioning function")


def _bound_texts(info: TableInfo, columns: tuple[str, ...], by_columns: bool, name: str,
                 values: tuple[Any, ...], in_list: bool) -> tuple[str, ...]:
    """The bound (or list value) texts of one partition definition: each literal checked against its column's type
    as TiDB does (``checkAndGetColumnsTypeAndValuesMatch`` for column lists, ``checkPartitionValuesIsInt`` for an
    expression) and written as TiDB stores it (``generatePartValuesWithTp``)."""
    if len(values) == 1 and values[0] is Default and in_list:
        return (DEFAULT,)
    if in_list and not by_columns and len(values) != 1:
        raise SqlError("Row expressions in VALUES IN only allowed for multi-field column partitioning")
    if len(values) != len(columns):
        if not by_columns and not in_list:
            raise SqlError("Cannot have more than one value for this type of RANGE partitioning")
        raise SqlError("Inconsistency in usage of column lists for partitioning")
    out = []
    for col_name, v in zip(columns, values, strict=True):
        col = info.column(col_name)
        if v is Maxvalue:
            if in_list:
                raise SqlError("Cannot use MAXVALUE as value in VALUES IN")
            out.append(MAXVALUE)
            continue
        if v is Default:
            raise SqlError("Partition column values of incorrect type")
        if v is None:
            if not in_list:
                raise SqlError("Not allowed to use NULL value in VALUES LESS THAN")
            out.append(NULL)
            continue
        if not by_columns:
            if not isinstance(v, int):
                raise SqlError(f"VALUES value for partition '{name}' must have type INT")
        elif not _value_fits_type(col.type, v):
            raise SqlError("Partition column values of incorrect type")
        try:
            out.append(partition_rule.bound_text(col, col.convert(v)))
        except (SchemaError, PartitionError):
            raise SqlError("Partition column values of incorrect type") from None
    return tuple(out)


def _value_fits_type(type_name: str, v: Any) -> bool:
    """``checkAndGetColumnsTypeAndValuesMatch``'s case by case check (a VARCHAR takes any literal)."""
    if type_name in ("date", "datetime", "time"):
        return isinstance(v, str | bytes)
    if type_name in ("tinyint", "smallint", "mediumint", "int", "bigint"):
        return isinstance(v, int)
    if type_name in ("char", "binary"):
        return isinstance(v, str | bytes)
    return True


def build_definitions(spec: PartitionSpec, info: TableInfo, columns: tuple[str, ...], ids: list[int],
                      by_columns: bool | None = None) -> tuple[PartitionDef, ...]:
    """The partitions ``spec`` defines for a table ``info`` partitioned by ``columns``, with ``ids`` (one per
    name, in order)."""
    cols = columns
    flag = spec.by_columns if by_columns is None else by_columns
    defs = []
    for i, (pid, name) in enumerate(zip(ids, spec.names, strict=True)):
        less: tuple[str, ...] = ()
        values: tuple[tuple[str, ...], ...] = ()
        if spec.type == RANGE:
            less = _bound_texts(info, cols, flag, name, spec.less_than[i], in_list=False)
        elif spec.type == LIST:
            values = tuple(_bound_texts(info, cols, flag, name, v, in_list=True) for v in spec.in_values[i])
        defs.append(PartitionDef(pid, name, less, values))
    return tuple(defs)


def build_partitions(spec: PartitionSpec, info: TableInfo, ids: list[int]) -> PartitionInfo:
    """The partitioning of table ``info`` that ``spec`` defines, with ``ids`` for its partitions; TiDB's rules
    checked (a ``SqlError`` with TiDB's text when one does not hold)."""
    columns = _table_columns(spec, info)
    try:
        partition_rule.check_column_types(spec.type, spec.by_columns, [info.column(c) for c in columns])
    except PartitionError as exc:
        raise SqlError(str(exc)) from exc
    part = PartitionInfo(spec.type, columns, build_definitions(spec, info, columns, ids), True, spec.by_columns,
                         empty_columns=spec.type == KEY and not spec.columns)
    try:
        partition_rule.validate(part, info.columns, info.name)
    except PartitionError as exc:
        raise SqlError(str(exc)) from exc
    _check_unique_keys(info, columns)
    return part
