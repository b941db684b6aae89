"""The names of result columns that have no alias, kept as the engine gives them to the query as written: SQLite
and MySQL name such a column by its text, DuckDB by its rendering of the text's parsed expression. The rewritten
query's text differs (and holds the row filters), so each such projection is given that name as its alias;
PostgreSQL names them by their kind (a function's name, ?column?), which the rewriting keeps."""

from __future__ import annotations

from collections import defaultdict, deque

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from dbtools.errors import UnsafeQueryError

# Projections named by the column they read, whatever their text.
_NAMED = (exp.Alias, exp.Column, exp.Star, exp.PositionalColumn)
# What ends a SELECT list at its own depth.
_LIST_ENDS = {
    TokenType.FROM,
    TokenType.WHERE,
    TokenType.GROUP_BY,
    TokenType.HAVING,
    TokenType.ORDER_BY,
    TokenType.LIMIT,
    TokenType.OFFSET,
    TokenType.FETCH,
    TokenType.UNION,
    TokenType.EXCEPT,
    TokenType.INTERSECT,
    TokenType.WINDOW,
    TokenType.QUALIFY,
    TokenType.INTO,
    TokenType.SEMICOLON,
}


def result_names(sql: str, tree: exp.Expression, db) -> list[tuple[exp.Expression, str]]:
    """(projection, the name the engine gives it as written) for each unaliased projection of every SELECT in
    `tree` (parsed from `sql`, not yet rewritten) that is not a bare column, where the engine names it after its
    text. Where the written text cannot be told, the name is the engine's for the projection as parsed, which
    holds nothing of the rewriting either. On MySQL, two projections of a derived table or CTE that would share a
    name are refused: MariaDB refuses them in some places and renames them in others."""
    if not db.result_names_by_text:
        return []
    selects = [s for s in tree.find_all(exp.Select) if any(not isinstance(p, _NAMED) for p in s.expressions)]
    if not selects:
        return []
    written = _written_lists(sql, db.dialect, db.result_names_keep_comments)
    outermost = tree
    while isinstance(outermost, exp.SetOperation):
        outermost = outermost.this
    named = []
    for select in selects:
        spans = written[_signature(select.expressions, db.dialect)]
        texts = (
            spans.popleft()
            if spans
            else [p.sql(dialect=db.dialect, comments=False) for p in select.expressions]
        )
        names = [
            (projection, db.result_name(text))
            for projection, text in zip(select.expressions, texts, strict=True)
            if not isinstance(projection, _NAMED)
        ]
        every = [name for _, name in names]
        shared = [name for name in every if every.count(name) > 1]
        if shared and db.dialect == "mysql" and select is not outermost:
            raise UnsafeQueryError(
                f"two columns of a derived table or CTE would both be named {shared[0]}: give them aliases"
            )
        named += [(p, n) for p, n in names if n]
    return named


def _signature(projections: list[exp.Expression], dialect: str) -> tuple[str, ...]:
    return tuple(p.sql(dialect=dialect, comments=False) for p in projections)


def _written_lists(sql: str, dialect: str, with_comments: bool) -> dict[tuple[str, ...], deque[list[str]]]:
    """The text of each item of each SELECT list in `sql`, in text order, by the list's generated form."""
    lists: dict[tuple[str, ...], deque[list[str]]] = defaultdict(deque)
    for spans in _select_lists(sql, dialect, with_comments):
        try:
            signature = _signature([sqlglot.parse_one(span, read=dialect) for span in spans], dialect)
        except SqlglotError:
            continue
        lists[signature].append(spans)
    return lists


class _List:
    """One SELECT list being read: its depth in parentheses, the items read so far, the one being read."""

    def __init__(self, depth: int, with_comments: bool) -> None:
        self.depth = depth
        self.with_comments = with_comments
        self.end = 0
        self.spans: list[tuple[int, int]] = []
        self.start: int | None = None

    def extend(self, token) -> None:
        if self.start is None:
            self.start = token.start
        self.end = token.end + 1

    def cut(self, upto: int) -> None:
        """End the item being read where the token that ends it starts (SQLite names it with the comments after
        it; MySQL without)."""
        if self.start is not None:
            self.spans.append((self.start, upto if self.with_comments else self.end))
        self.start = None


def _select_lists(sql: str, dialect: str, with_comments: bool) -> list[list[str]]:
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
    except SqlglotError:
        return []
    depth, reading, done = 0, [], []
    previous = None
    for token in tokens:
        kind = token.token_type
        if kind in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
            depth -= 1
            while reading and reading[-1].depth > depth:  # a subquery's list ends with its parenthesis
                closed = reading.pop()
                closed.cut(token.start)
                done.append(closed)
        owner = reading[-1] if reading else None
        if owner is not None and owner.depth == depth and kind == TokenType.COMMA:
            owner.cut(token.start)
        elif owner is not None and owner.depth == depth and kind in _LIST_ENDS:
            owner.cut(token.start)
            done.append(reading.pop())
        elif owner is not None and not (
            owner.start is None
            and not owner.spans
            and kind in (TokenType.DISTINCT, TokenType.ALL)
            and previous == TokenType.SELECT
        ):
            owner.extend(token)
        if kind == TokenType.SELECT:
            reading.append(_List(depth, with_comments))
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
            depth += 1
        previous = kind
    for left in reading:
        left.cut(len(sql))
        done.append(left)
    done.sort(key=lambda found: found.spans[0][0] if found.spans else 0)
    return [
        [sql[start:end].strip().rstrip(";").strip() for start, end in found.spans]
        for found in done
        if found.spans
    ]
