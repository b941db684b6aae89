"""The read-only policy: a sqlglot allowlist that every user statement passes before an engine runs it.

The engines enforce read-only access on their own as well; this check refuses early, with a reason.
"""

from __future__ import annotations

import threading

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from dbtools.access.functions import function_refusal
from dbtools.errors import UnparsableQueryError, UnsafeQueryError, first_line

# Statement kinds that change data, schema, settings, transactions or files, wherever they appear.
_FORBIDDEN_NODES: dict[type[exp.Expression], str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.Copy: "COPY",
    exp.Attach: "ATTACH",
    exp.Detach: "DETACH",
    exp.Pragma: "PRAGMA",
    exp.Set: "SET",
    exp.Transaction: "BEGIN",
    exp.Commit: "COMMIT",
    exp.Rollback: "ROLLBACK",
    exp.Grant: "GRANT",
    exp.Revoke: "REVOKE",
    exp.LoadData: "LOAD DATA",
    exp.Use: "USE",
    exp.Analyze: "ANALYZE",
    exp.Kill: "KILL",
    exp.Comment: "COMMENT",
    exp.Export: "EXPORT",
    exp.Command: "an unsupported command",
}

# MySQL runs the text of /*! ... */ and MariaDB of /*M! ... */ comments as SQL, and /*+ ... */ hints (MySQL's, or
# pg_hint_plan's in PostgreSQL) can change settings for the statement: to the allowlist they are comments, so they
# are refused in every dialect.
_EXECUTABLE_COMMENT_MARKS = ("!", "M!")


# Parsing runs before any statement timeout can apply, so the text it is given is bounded.
MAX_QUERY_CHARS = 100_000
# Statements that passed, remembered so that running one again skips the parse: (sql, dialect), oldest first.
MAX_REMEMBERED_STATEMENTS = 256
MAX_REMEMBERED_SQL_CHARS = 8_000
_passed: dict[tuple[str, str], None] = {}
_passed_lock = threading.Lock()


def check_query(sql: str, dialect: str) -> None:
    """Raise UnsafeQueryError saying why unless `sql` is one read-only query.

    The verdict depends on the text alone, so a statement that passed is remembered: running it again costs no
    second parse (about 2 ms for a join of a few lines)."""
    key = (sql, dialect)
    if key in _passed:
        return
    _check_statement(sql, dialect)
    if len(sql) <= MAX_REMEMBERED_SQL_CHARS:
        with _passed_lock:
            if len(_passed) >= MAX_REMEMBERED_STATEMENTS:
                _passed.pop(next(iter(_passed)), None)  # the oldest
            _passed[key] = None


def _check_statement(sql: str, dialect: str) -> None:
    if not sql or not sql.strip():
        raise UnsafeQueryError("empty query: send one SELECT statement")
    if "\x00" in sql:
        # libpq would cut the text at the NUL and run only what comes before it.
        raise UnsafeQueryError("the query contains a NUL character (\\x00): remove it")
    if len(sql) > MAX_QUERY_CHARS:
        raise UnsafeQueryError(
            f"the query is {len(sql)} characters long; the limit is {MAX_QUERY_CHARS}: write a shorter one"
        )
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except RecursionError:
        raise UnsafeQueryError("the query is nested too deeply to check: flatten its subqueries") from None
    except (
        SqlglotError,
        IndexError,
    ) as exc:  # sqlglot's parser fails with IndexError on some text (SHOW ALL)
        if _separates_statements(sql, dialect):
            raise UnsafeQueryError(
                "only one statement per call is allowed: send them one at a time"
            ) from None
        raise UnparsableQueryError(f"could not parse the query: {first_line(exc)}") from None
    if not statements:
        raise UnsafeQueryError("empty query (only comments): send one SELECT statement")
    if len(statements) > 1:
        raise UnsafeQueryError(
            f"only one statement per call is allowed; found {len(statements)}: send them one at a time"
        )
    statement = statements[0]
    if not isinstance(statement, (exp.Query, exp.Values)):
        raise UnsafeQueryError(
            f"only read-only queries (SELECT, WITH ... SELECT, VALUES) are allowed; "
            f"this is {_kind(statement)} statement"
        )
    _check_executable_comments(sql, dialect)
    for node in statement.walk():
        _check_node(node, dialect)


def _check_executable_comments(sql: str, dialect: str) -> None:
    for token in sqlglot.tokenize(sql, read=dialect):
        if token.token_type == TokenType.HINT or any(c.startswith("+") for c in token.comments):
            raise UnsafeQueryError("optimizer hints (/*+ ... */) are not allowed: they can change settings")
        if any(comment.startswith(_EXECUTABLE_COMMENT_MARKS) for comment in token.comments):
            raise UnsafeQueryError(
                "executable comments (/*! ... */, /*M! ... */) are not allowed: MySQL runs their text as SQL"
            )


def _check_node(node: exp.Expression, dialect: str) -> None:
    for node_type, kind in _FORBIDDEN_NODES.items():
        if isinstance(node, node_type):
            raise UnsafeQueryError(f"{kind} inside a query is not allowed: access is read-only")
    if isinstance(node, exp.Into):
        raise UnsafeQueryError("SELECT ... INTO creates a table and is not allowed: access is read-only")
    if isinstance(node, exp.Lock):
        raise UnsafeQueryError(
            "locking clauses (FOR UPDATE / FOR SHARE) are not allowed: access is read-only"
        )
    if dialect == "mysql" and isinstance(node, exp.PropertyEQ):
        raise UnsafeQueryError("assigning variables (@name := value) is not allowed: it outlives the query")
    if isinstance(node, exp.Func):
        refusal = function_refusal(node, dialect)
        if refusal:
            raise UnsafeQueryError(refusal)


def _kind(statement: exp.Expression) -> str:
    if isinstance(statement, exp.Command):
        kind = str(statement.this).upper()
    else:
        kind = next(
            (k for t, k in _FORBIDDEN_NODES.items() if isinstance(statement, t)), statement.key.upper()
        )
    return ("an " if kind[:1] in "AEIOU" else "a ") + kind


def _separates_statements(sql: str, dialect: str) -> bool:
    """True when a semicolon outside strings and comments has more text after it."""
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
    except SqlglotError:
        return ";" in sql.rstrip().rstrip(";")  # cannot tell strings apart: assume the worst
    positions = [i for i, t in enumerate(tokens) if t.token_type == TokenType.SEMICOLON]
    return any(i < len(tokens) - 1 and tokens[i + 1].token_type != TokenType.SEMICOLON for i in positions)


def referenced_tables(sql: str, dialect: str) -> list[str]:
    """Tables a statement reads, as written (schema-qualified where it is), CTE names left out; [] if unparsable."""
    if len(sql) > MAX_QUERY_CHARS:
        return []
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (SqlglotError, RecursionError, IndexError):
        return []
    names: list[str] = []
    for statement in statements:
        cte_names = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
        # In the order they appear in the text, which is the order a reader expects.
        tables = sorted(statement.find_all(exp.Table), key=lambda t: t.this.meta.get("start", 0))
        for table in tables:
            if not isinstance(table.this, exp.Identifier):
                continue  # a table function such as generate_series(...)
            if not table.db and table.name.lower() in cte_names:
                continue
            name = f"{table.db}.{table.name}" if table.db else table.name
            if name not in names:
                names.append(name)
    return names
