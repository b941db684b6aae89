"""Long values cut on the PostgreSQL server, before they are sent.

libpq receives a row whole before psycopg sees any of it, so the character cap, applied on the client, came
too late for one value of hundreds of megabytes: it had crossed the network and filled memory twice (libpq's
buffer, then the Python string). A row is one protocol message, so no client-side streaming can stop part-way
through it; instead the statement is wrapped and each column that can hold a long value is cut in the query
itself, one character past the cap, which still tells the cap that the value was cut. Values within the cap
arrive exactly as before, with their types; the statement's names and types are taken from its own
description, never from the wrapper.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

# Types of a fixed size, and numeric (at most ~150,000 digits): sent as they are.
_BOUNDED_TYPES = frozenset(
    {
        16,  # bool
        18,  # "char"
        19,  # name
        20,  # int8
        21,  # int2
        23,  # int4
        26,  # oid
        600,  # point
        601,  # lseg
        603,  # box
        628,  # line
        650,  # cidr
        700,  # float4
        701,  # float8
        718,  # circle
        774,  # macaddr8
        790,  # money
        829,  # macaddr
        869,  # inet
        1082,  # date
        1083,  # time
        1114,  # timestamp
        1184,  # timestamptz
        1186,  # interval
        1266,  # timetz
        1700,  # numeric
        2950,  # uuid
        3220,  # pg_lsn
    }
)
_TEXT_TYPES = frozenset({25, 1043})  # text, varchar: left() returns a short value unchanged
_BYTEA = 17
_MAX_COLUMNS = 1600  # the wrapper adds columns; PostgreSQL allows 1664 in a result


@dataclass(frozen=True)
class CappedStatement:
    sql: str
    restore: Callable[[tuple], tuple]  # a row of `sql` back into a row of the statement it wraps


def capped_statement(
    sql: str, type_oids: Sequence[int], max_chars: int, max_rows: int
) -> CappedStatement | None:
    """`sql` wrapped so that no value leaves the server much longer than `max_chars` characters, given the
    type OIDs of its columns, and no more than `max_rows` rows are made; None when it cannot be wrapped.

    Text and varchar are cut with left() and bytea with substring(), which keep their types. A value of any
    other type whose size on the server is over 4 bytes a character comes instead as its text, cut, in an
    extra column (a column cannot hold both types), and `restore` puts it back in its place.
    """
    body = _without_final_semicolons(sql)
    if body is None or not type_oids:
        return None
    keep = max_chars + 1
    outputs: list[str] = []
    spare_sources: list[int] = []
    spares: list[str] = []
    for i, oid in enumerate(type_oids):
        column = f"q.c{i}"
        if oid in _BOUNDED_TYPES:
            outputs.append(column)
        elif oid in _TEXT_TYPES:
            outputs.append(f"left({column}, {keep})")
        elif oid == _BYTEA:
            outputs.append(
                f"substring({column} FROM 1 FOR {keep // 2 + 1})"
            )  # printed as 2 hex digits a byte
        else:
            too_long = f"pg_column_size({column}) > {4 * keep}"
            outputs.append(f"CASE WHEN {too_long} THEN NULL ELSE {column} END")
            spares.append(f"CASE WHEN {too_long} THEN left({column}::text, {keep}) END")
            spare_sources.append(i)
    if len(outputs) + len(spares) > _MAX_COLUMNS:
        return None
    aliases = ", ".join(f"c{i}" for i in range(len(type_oids)))
    # OFFSET 0 keeps the statement a subquery of its own: pulled up into the wrapper, each of its expressions
    # would be computed once for every reference to its column.
    # The LIMIT lets the server stop at the row cap (and plan for the first rows) instead of making rows that
    # a cancel then has to stop and the client to drain.
    wrapped = (
        f"SELECT {', '.join(outputs + spares)} FROM (SELECT * FROM (\n{body}\n) AS s OFFSET 0) AS q({aliases}) "
        f"LIMIT {max_rows}"
    )
    width = len(type_oids)

    def restore(row: tuple) -> tuple:
        if not spare_sources:
            return row
        values = list(row[:width])
        for source, cut in zip(spare_sources, row[width:], strict=True):
            if cut is not None:
                values[source] = cut
        return tuple(values)

    return CappedStatement(wrapped, restore)


def _without_final_semicolons(sql: str) -> str | None:
    """`sql` up to its last token that is not a semicolon, so that it can stand in parentheses; None when it
    cannot be tokenised."""
    try:
        tokens = sqlglot.tokenize(sql, read="postgres")
    except SqlglotError:
        return None
    body = [t for t in tokens if t.token_type != TokenType.SEMICOLON]
    return sql[: body[-1].end + 1] if body else None
