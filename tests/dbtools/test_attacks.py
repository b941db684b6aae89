"""The attack suite: every family of write, escape and abuse meets the parser on every engine and is refused
before anything runs; with the parser switched off, each attack runs on the engines whose dialect it targets, as a
SELECT-only role, and changes no table and leaves no file where it aimed one."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import psycopg.conninfo
import pytest

import dbtools.engines.database
from dbtools.agent_tools import AgentToolbox
from dbtools.engines import open_database
from dbtools.engines.database import Database
from dbtools.engines.mysql import SQL_MODE
from dbtools.errors import DatabaseToolError, QueryError, UnsafeQueryError
from tests.fixture_schema import ENGINES, mysql_connection, snapshot, tables_named

EVERY_ENGINE = ("sqlite", "postgres", "mysql", "duckdb", "csv")
# DuckDB's dialect, over its own database file and over a folder of CSV files.
DUCKDB = ("duckdb", "csv")
# Each family of attacks, with the engines whose dialect it targets: without the parser check an attack runs only
# there (elsewhere it is a syntax error or an unknown function); through the parser it meets every engine.
ATTACKS: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "multi-statement": (
        EVERY_ENGINE,
        [
            "SELECT 1; DROP TABLE users",
            "COMMIT; DROP TABLE users",
            "SELECT 1; COMMIT; SET default_transaction_read_only = off; DELETE FROM users",
            "select 1;\nDELETE FROM users --",
            "SELECT 1 -- a comment\n; DELETE FROM users",
            "SELECT 1 /* ; */; UPDATE users SET name = 'x'",
            "SELECT 'a'';'; DELETE FROM users",
        ],
    ),
    "plain writes and DDL": (
        EVERY_ENGINE,
        [
            "DELETE FROM users",
            "DeLeTe FrOm users",
            "UPDATE users SET name = 'pwned'",
            "INSERT INTO aler VALUES (99, 'x')",
            "REPLACE INTO aler VALUES (1, 'x')",
            "DROP TABLE users",
            "CREATE TABLE stolen (a INTEGER)",
            "CREATE TEMP TABLE stolen AS SELECT * FROM users",
            "ALTER TABLE users ADD COLUMN pwned INTEGER",
            "TRUNCATE users",
            "/* SELECT */ DELETE FROM users",
            "-- SELECT\nDELETE FROM users",
        ],
    ),
    "writable CTE": (
        ("postgres",),
        [
            "WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d",
            "WITH u AS (UPDATE users SET name = 'x' RETURNING id) SELECT count(*) FROM u",
            "WITH i AS (INSERT INTO aler VALUES (99, 'x') RETURNING id) SELECT * FROM i",
            "WITH a AS (SELECT 1), d AS (DELETE FROM aler RETURNING id) SELECT * FROM a",
        ],
    ),
    "SELECT INTO": (
        ("postgres", "mysql"),
        [
            "SELECT * INTO stolen FROM users",
            "SELECT name INTO TEMP stolen FROM users",
            "SELECT id INTO UNLOGGED stolen FROM users WHERE id < 3",
        ],
    ),
    "locking clause": (
        ("postgres", "mysql"),
        [
            "SELECT * FROM users FOR UPDATE",
            "SELECT * FROM users FOR SHARE",
            "SELECT * FROM users WHERE id IN (SELECT id FROM users FOR NO KEY UPDATE NOWAIT)",
        ],
    ),
    # DuckDB implements pg_sleep and other PostgreSQL catalog functions.
    "PostgreSQL functions": (
        ("postgres", *DUCKDB),
        [
            "SELECT pg_sleep(5)",
            "SELECT pg_catalog.pg_sleep(5)",
            'SELECT "pg_sleep"(5)',
            "SELECT PG_SLEEP_FOR('5 seconds')",
            "SELECT pg_read_file('/etc/passwd')",
            "SELECT pg_read_binary_file('/etc/passwd')",
            "SELECT pg_ls_dir('.')",
            "SELECT lo_export({lo}, '{dir}/lo-export')",
            "SELECT lo_import('/etc/passwd')",
            "SELECT * FROM dblink('host=127.0.0.1', 'DELETE FROM users') AS t(a TEXT)",
            "SELECT set_config('default_transaction_read_only', 'off', false)",
            "SELECT pg_advisory_lock(42)",
            "SELECT nextval('users_id_seq')",
            "SELECT query_to_xml('DELETE FROM users', true, true, '')",
            "SELECT pg_terminate_backend(pg_backend_pid())",
            "SELECT name FROM users WHERE id = (SELECT pg_sleep(5))::int",
        ],
    ),
    "SQLite functions": (
        ("sqlite",),
        ["SELECT load_extension('{dir}/evil')", "SELECT writefile('{dir}/writefile', 'x')"],
    ),
    "settings": (
        ("postgres", "mysql", *DUCKDB),
        [
            "SET default_transaction_read_only = off",
            "SET statement_timeout = 0",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
            "RESET ALL",
            "SET ROLE postgres",
        ],
    ),
    "transaction control": (
        EVERY_ENGINE,
        ["BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION READ WRITE", "END"],
    ),
    "COPY": (
        ("postgres", *DUCKDB),
        [
            "COPY users TO PROGRAM 'touch {dir}/copy-to-program'",
            "COPY (SELECT * FROM users) TO '{dir}/copy-query.csv'",
            "COPY users TO '{dir}/copy-table.csv'",
            "COPY users FROM PROGRAM 'touch {dir}/copy-from-program'",
            "DO $$ BEGIN EXECUTE 'COPY users TO PROGRAM ''touch {dir}/do-copy'''; END $$",
        ],
    ),
    "server commands": (
        ("postgres", "mysql", *DUCKDB),
        [
            "EXPLAIN ANALYZE DELETE FROM users",
            "PREPARE p AS DELETE FROM users",
            "EXECUTE p",
            "DO $$ BEGIN DELETE FROM users; END $$",
            "SELECT $$;$$; DELETE FROM users",
            "LOCK TABLE users",
            "GRANT ALL ON users TO PUBLIC",
            "CREATE EXTENSION dblink",
            "LISTEN x",
            "NOTIFY x",
            "DISCARD ALL",
        ],
    ),
    "maintenance commands": (EVERY_ENGINE, ["VACUUM", "ANALYZE users", "REINDEX", "SHOW ALL"]),
    # DuckDB takes PRAGMA statements too.
    "SQLite pragmas": (
        ("sqlite", *DUCKDB),
        [
            "PRAGMA query_only = OFF",
            "PRAGMA writable_schema = ON",
            "PRAGMA journal_mode = DELETE",
            "PRAGMA user_version = 7",
        ],
    ),
    "MySQL files": (
        ("mysql",),
        [
            "SELECT LOAD_FILE('/etc/passwd')",
            "SELECT * FROM users INTO OUTFILE '{dir}/outfile.csv'",
            "SELECT * INTO OUTFILE '{dir}/outfile-first.csv' FROM users",
            "SELECT name FROM users LIMIT 1 INTO DUMPFILE '{dir}/dumpfile'",
            "LOAD DATA INFILE '/etc/hostname' INTO TABLE aler",
            "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE aler",
        ],
    ),
    "MySQL executable comments and hints": (
        ("mysql",),
        [
            "SELECT 1 /*! INTO OUTFILE '{dir}/comment.csv' */",
            "SELECT 1 /*!50000 , LOAD_FILE('/etc/passwd') */",
            "SELECT 1 /*M! , LOAD_FILE('/etc/passwd') */",
            "SELECT /*+ MAX_EXECUTION_TIME(100000) */ count(*) FROM users",
        ],
    ),
    "MySQL waits, locks and session state": (
        ("mysql",),
        [
            "SELECT SLEEP(5)",
            "SELECT BENCHMARK(100000000, MD5('x'))",
            "DO SLEEP(5)",
            "SELECT GET_LOCK('sqlscout', 0)",
            "HANDLER users OPEN",
            "SELECT * FROM users LOCK IN SHARE MODE",
            "LOCK TABLES users WRITE",
            "SELECT @a := 1",
            "SELECT 1 INTO @a",
            "SET @a = 1",
            "SET SESSION tx_read_only = 0",
            "SET GLOBAL read_only = 0",
            "SET NAMES latin1",
            "XA START 'x'",
        ],
    ),
    "MySQL server commands": (
        ("mysql",),
        [
            "RENAME TABLE users TO users_renamed",
            "CREATE DATABASE sqlscout_evil",
            "CALL mysql.evil()",
            "FLUSH TABLES",
            "INSTALL SONAME 'ha_blackhole'",
            "KILL QUERY 1",
            "SHUTDOWN",
        ],
    ),
    "DuckDB files": (
        DUCKDB,
        [
            "COPY users TO '{dir}/copy.parquet' (FORMAT parquet)",
            "COPY (SELECT 1 AS id) TO '{data}' (USE_TMP_FILE false)",
            "EXPORT DATABASE '{dir}/export'",
            "ATTACH '{dir}/evil.duckdb' AS evil",
            "SELECT * FROM read_text('/etc/passwd')",
            "SELECT * FROM read_csv('/etc/passwd')",
            "SELECT * FROM '/etc/passwd'",
            "SELECT * FROM glob('/*')",
            "SELECT * FROM query('DELETE FROM users')",
        ],
    ),
    "DuckDB settings and extensions": (
        DUCKDB,
        [
            "INSTALL httpfs",
            "LOAD httpfs",
            "SET enable_external_access = true",
            "RESET enable_external_access",
            "SET allowed_paths = ['/']",
            "SET lock_configuration = false",
            "CREATE SECRET s (TYPE s3, KEY_ID 'x', SECRET 'y')",
            "CHECKPOINT",
            "CALL checkpoint()",
            "PRAGMA enable_profiling",
            "USE memory",
            "CREATE MACRO m() AS 1",
        ],
    ),
}
FILE_ATTACKS = [
    "ATTACH DATABASE '{dir}/evil.db' AS evil",
    "ATTACH '{dir}/evil2.db' AS evil",
    "ATTACH DATABASE 'file:{dir}/evil3.db?mode=rwc' AS evil",
    "VACUUM INTO '{dir}/copy.db'",
    "SELECT 1; ATTACH DATABASE '{dir}/evil4.db' AS evil",
]
# Plain SELECTs that the parser reads as harmless: an assignment only MySQL makes, and a file named as a table, which
# is a table name to the parser; each engine's compiler rejects them (DuckDB with external access off). Functions
# that only another dialect has are on no allow list of the dialect, so the parser refuses them.
LEFT_TO_THE_ENGINE = {
    "SELECT @a := 1": ("sqlite", "postgres", *DUCKDB),
    "SELECT * FROM '/etc/passwd'": EVERY_ENGINE,
}
SERVER_MARKS = {"postgres": pytest.mark.postgres, "mysql": pytest.mark.mysql}


def on_engines(cases: list[tuple[str, str, tuple[str, ...]]]) -> list:
    """(engine, statement) for each case's engines, one engine after the other, marked with the server it needs."""
    return [
        pytest.param(engine, sql, marks=SERVER_MARKS.get(engine, ()), id=f"{engine}-{family}: {sql[:50]}")
        for engine in EVERY_ENGINE
        for family, sql, engines in cases
        if engine in engines
    ]


FAMILY_CASES = [(family, sql, engines) for family, (engines, sqls) in ATTACKS.items() for sql in sqls]
# Every attack on every engine, through the parser.
PARSER_ATTACKS = on_engines(
    [
        (family, sql, tuple(e for e in EVERY_ENGINE if e not in LEFT_TO_THE_ENGINE.get(sql, ())))
        for family, sql, _ in FAMILY_CASES
    ]
    + [("files", sql, EVERY_ENGINE) for sql in FILE_ATTACKS]
)
ENGINE_ATTACKS = on_engines(
    [(family, sql, LEFT_TO_THE_ENGINE[sql]) for family, sql, _ in FAMILY_CASES if sql in LEFT_TO_THE_ENGINE]
)
# Each attack on each engine its dialect targets.
TARGETED_ATTACKS = on_engines(FAMILY_CASES)
# SQLite's and DuckDB's ways to write a file: both refuse them outright.
FILE_ENGINES = ("sqlite", *DUCKDB)
# An attack's folder where nothing is written: the parser refuses the attack before it reaches the database.
NEVER_WRITTEN = Path("/nonexistent/sqlscout-attack")


@pytest.fixture(scope="module", params=[*ENGINES, "csv"])
def engine(request) -> str:
    """Every engine, and DuckDB over a folder of CSV files besides its own database file."""
    return request.param


@pytest.fixture(scope="module")
def dsn(engine, request) -> str:
    return request.getfixturevalue(f"{engine}_dsn")


@pytest.fixture(scope="module")
def db(dsn):
    """One database for every attack on an engine, as a server would keep it, so that no attack's state may carry
    over into the next."""
    database = open_database(dsn, timeout_s=1.0)
    yield database
    database.close()


@pytest.fixture(scope="module")
def postgres_reader_dsn(postgres_dsn) -> Iterator[str]:
    """The fixture database through a role that may only connect, use its schemas and SELECT their tables:
    the boundary the security notes rely on once the parser check is gone."""
    role = f"attack_reader_{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    database = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOINHERIT PASSWORD '{password}'")
        # PUBLIC keeps CONNECT (other tests' roles need it) but loses TEMP, so the role has nothing more.
        conn.execute(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
        conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
        for schema in ("public", "sales"):
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        privileges = conn.execute(
            "SELECT rolsuper, has_database_privilege(%s, current_database(), 'CREATE'), "
            "has_database_privilege(%s, current_database(), 'TEMP'), "
            "has_schema_privilege(%s, 'public', 'CREATE'), pg_has_role(%s, 'pg_write_server_files', 'USAGE'), "
            "pg_has_role(%s, 'pg_execute_server_program', 'USAGE') FROM pg_roles WHERE rolname = %s",
            (role,) * 6,
        ).fetchone()
    assert privileges == (False, False, False, False, False, False)
    try:
        yield psycopg.conninfo.make_conninfo(postgres_dsn, user=role, password=password)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.fixture(scope="module")
def postgres_large_object(postgres_dsn) -> int:
    """A large object the lo_export attack can name: with none, lo_export fails before writing anything."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        return conn.execute("SELECT lo_from_bytea(0, 'secret')").fetchone()[0]


@pytest.fixture(scope="module")
def mysql_reader_dsn(mysql_dsn) -> Iterator[str]:
    """The fixture database through an account granted SELECT on it and nothing else: no FILE privilege, so the
    server's files stay out of reach once the parser check is gone."""
    account = f"attack_reader_{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    database = mysql_dsn.rsplit("/", 1)[1]
    with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE USER '{account}'@'%' IDENTIFIED BY '{password}'")
        cursor.execute(f"GRANT SELECT ON `{database}`.* TO '{account}'@'%'")
        cursor.execute(f"SHOW GRANTS FOR '{account}'@'%'")
        grants = [row[0] for row in cursor.fetchall()]
    assert len(grants) == 2 and grants[1].startswith(f"GRANT SELECT ON `{database}`.*"), grants
    server = mysql_dsn.split("@", 1)[1]
    try:
        yield f"mysql://{account}:{password}@{server}"
    finally:
        with mysql_connection(mysql_dsn) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP USER '{account}'@'%'")


@contextmanager
def aimed_folder(engine: str, dsn: str, request) -> Iterator[tuple[Path, Callable[[str], str]]]:
    """An empty folder the database server can write to, and a function pointing an attack's files into it.

    A PostgreSQL server runs as its own OS user (postgres): the folder is world-writable, and a COPY run directly
    as the superuser proves that a file written there by the server would show up; so does INTO OUTFILE run
    directly as MariaDB's root.
    """
    folder = Path(tempfile.mkdtemp(prefix="sqlscout-attack-"))
    folder.chmod(0o777)
    large_object = 0
    try:
        probe = folder / "probe.csv"
        if engine == "postgres":
            large_object = request.getfixturevalue("postgres_large_object")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"COPY (SELECT 1) TO '{probe}'")
        if engine == "mysql":
            with mysql_connection(dsn) as conn, conn.cursor() as cursor:
                cursor.execute(f"SELECT 1 INTO OUTFILE '{probe}'")
        if engine in ("postgres", "mysql"):
            assert probe.read_text() == "1\n", f"the {engine} server cannot write into {folder}"
            probe.unlink()
        yield folder, lambda sql: aimed(sql, engine, dsn, folder, large_object)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def aimed(sql: str, engine: str, dsn: str, folder: Path, large_object: int = 0) -> str:
    """The attack with its files in `folder` ({dir}), `large_object` as its large object ({lo}), and {data} the
    database's own data: its file, or one of its CSV files."""
    data = {"sqlite": dsn, "duckdb": dsn, "csv": str(Path(dsn) / "users.csv")}.get(
        engine, str(folder / "data")
    )
    return sql.replace("{dir}", str(folder)).replace("{lo}", str(large_object)).replace("{data}", data)


# The DSN fixture of the account an attack without the parser check runs as: SQLite and DuckDB are read-only as
# ever; PostgreSQL and MySQL get the SELECT-only role or account rather than the superuser or root.
READER_DSNS = {"postgres": "postgres_reader_dsn", "mysql": "mysql_reader_dsn"}


@pytest.fixture(scope="module")
def databases() -> Iterator[Callable[[str], Database]]:
    """The database of a DSN, opened on first use and kept for every attack on it, as a server would keep it, so
    that no attack's state may carry over into the next; a short timeout: with the parser check off, a sleeping
    attack runs until the engine cancels it."""
    opened: dict[str, Database] = {}

    def database(dsn: str) -> Database:
        if dsn not in opened:
            opened[dsn] = open_database(dsn, timeout_s=0.25)
        return opened[dsn]

    yield database
    for each in opened.values():
        each.close()


@pytest.mark.parametrize(("target", "sql"), PARSER_ATTACKS)
def test_the_parser_refuses_every_attack_before_it_runs(target, sql, databases, request, monkeypatch):
    """Through the parser check nothing of an attack runs, even as the superuser (whom READ ONLY does not stop from
    writing files): here, whatever the check let through would run as a query that returns no rows."""
    dsn = request.getfixturevalue(f"{target}_dsn")
    db = databases(dsn)
    monkeypatch.setattr(db, "_run_capped", lambda sql, caps, timeout_s: [])
    attack = aimed(sql, target, dsn, NEVER_WRITTEN)
    with pytest.raises(DatabaseToolError) as refused:
        db.query(attack)
    assert str(refused.value)
    assert AgentToolbox(db).call("run_query", {"sql": attack}).error is not None


@pytest.mark.parametrize(("target", "sql"), ENGINE_ATTACKS)
def test_what_the_parser_leaves_to_the_engine_is_refused_there_and_changes_nothing(
    target, sql, databases, request
):
    """Run as the superuser, through the parser check."""
    dsn = request.getfixturevalue(f"{target}_dsn")
    tables = tables_named(sql)
    before = snapshot(dsn, target, tables)
    with pytest.raises(QueryError):
        databases(dsn).query(sql)
    assert snapshot(dsn, target, tables) == before


# Slow (left out of the fast tier): the attack matrix run on the engines, some attacks until their timeout.
@pytest.mark.slow
@pytest.mark.parametrize(("target", "sql"), TARGETED_ATTACKS)
def test_the_engine_refuses_writes_even_without_the_parser_check(
    target, sql, databases, request, monkeypatch
):
    """Defence in depth: with the allowlist switched off, the read-only engine under a SELECT-only role changes
    no table the attack names (nor the list of tables or databases) and writes no file."""
    dsn = request.getfixturevalue(f"{target}_dsn")
    reader = databases(request.getfixturevalue(READER_DSNS.get(target, f"{target}_dsn")))
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    tables = tables_named(sql)
    with aimed_folder(target, dsn, request) as (folder, aim):
        before = snapshot(dsn, target, tables)
        try:
            reader.query(aim(sql))
        except DatabaseToolError:
            pass
        assert os.listdir(folder) == []
        assert snapshot(dsn, target, tables) == before


@pytest.mark.parametrize(("target", "template"), [(e, t) for e in FILE_ENGINES for t in FILE_ATTACKS])
def test_attach_and_vacuum_into_are_refused_without_the_parser_check(
    target, template, databases, request, tmp_path, monkeypatch
):
    """No file appears where the statement aims it, nor beside the database (its folder is in the snapshot)."""
    dsn = request.getfixturevalue(f"{target}_dsn")
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    before = snapshot(dsn, target)
    with pytest.raises(DatabaseToolError):
        databases(dsn).query(template.format(dir=tmp_path))
    assert os.listdir(tmp_path) == []
    assert snapshot(dsn, target) == before


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; DROP TABLE users",
        "WITH d AS (DELETE FROM users RETURNING *) SELECT 1",
        "SELECT * INTO x FROM users",
        "SELECT * FROM users FOR UPDATE",
        "SELECT pg_sleep(1)",
        "SET x = 1",
        "DROP TABLE users",
    ],
)
def test_refusals_are_policy_errors_with_a_reason(db, sql):
    with pytest.raises(UnsafeQueryError) as refused:
        db.query(sql)
    message = str(refused.value)
    assert any(word in message for word in ("one statement", "read-only", "not allowed"))


@pytest.mark.parametrize(
    "name",
    [
        "users; DROP TABLE users",
        'users"; DROP TABLE users; --',
        "users' OR '1'='1",
        "users) UNION SELECT sql FROM sqlite_master --",
        "pg_catalog.pg_authid",
        "sqlite_master",
        "mysql.user",
        "information_schema.tables",
        "duckdb_settings",
    ],
)
def test_injection_through_table_and_column_names(db, dsn, engine, name):
    tables = tables_named(name)
    before = snapshot(dsn, engine, tables)
    tools = AgentToolbox(db)
    for tool, args in [
        ("describe_table", {"table_name": name}),
        ("sample_rows", {"table_name": name, "limit": 3}),
        ("foreign_keys", {"table_name": name}),
        ("join_path", {"table_a": name, "table_b": "users"}),
        ("distinct_values", {"table_name": name, "column_name": "id"}),
        ("distinct_values", {"table_name": "users", "column_name": name}),
    ]:
        output = tools.call(tool, args)
        assert output.error is not None and output.error.startswith("no "), (tool, output.text)
    assert snapshot(dsn, engine, tables) == before


def test_identifiers_with_quotes_and_keywords_are_quoted(db):
    tools = AgentToolbox(db)
    assert tools.call("sample_rows", {"table_name": "weird name", "limit": 1}).text == "id | select\n1 | a"
    assert tools.call("distinct_values", {"table_name": "WEIRD NAME", "column_name": "SELECT"}).text == "a\nb"


@pytest.mark.postgres
def test_nothing_leaks_between_pooled_connections(postgres_dsn, monkeypatch):
    """A setting changed inside one call is gone in the next, whichever pooled connection it gets (the parser check,
    which refuses both the changes and the reads of settings, is off throughout)."""
    db = open_database(postgres_dsn, timeout_s=3.0)
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    for _ in range(3):
        db.query(
            "SELECT set_config('statement_timeout', '0', false), set_config('search_path', 'sales', false)"
        )
        db.query("SELECT set_config('default_transaction_read_only', 'off', false)")
    for _ in range(6):
        rows = db.query(
            "SELECT current_setting('statement_timeout'), current_setting('search_path'), "
            "current_setting('transaction_read_only')"
        ).rows
        assert rows == [("3s", '"$user", public', "on")]
    db.close()


@pytest.mark.mysql
def test_no_session_state_leaks_between_pooled_mysql_connections(mysql_dsn, monkeypatch):
    """User variables, locks and session settings set inside one call are gone in the next, whichever pooled
    connection it gets (the parser check is off throughout)."""
    db = open_database(mysql_dsn, timeout_s=3.0)
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    for statement in (
        "SELECT @stolen := 42, GET_LOCK('sqlscout-leak', 0)",
        "SET SESSION tx_read_only = 0",
        "SET SESSION max_statement_time = 0",
        "SET SESSION sql_mode = 'ANSI_QUOTES'",
    ):
        for _ in range(3):
            db.query(statement)
    for _ in range(6):
        rows = db.query(
            "SELECT @stolen, IS_USED_LOCK('sqlscout-leak'), @@tx_read_only, @@max_statement_time, @@sql_mode"
        ).rows
        assert rows == [(None, None, 1, 3.0, SQL_MODE)]
    db.close()


@pytest.mark.mysql
def test_a_select_only_mysql_account_reads_no_server_files(mysql_reader_dsn, monkeypatch):
    """Without the parser check, LOAD_FILE runs: as an account without the FILE privilege it reads nothing."""
    db = open_database(mysql_reader_dsn, timeout_s=3.0)
    monkeypatch.setattr(dbtools.engines.database, "check_query", lambda sql, dialect: None)
    assert db.query("SELECT LOAD_FILE('/etc/hostname')").rows == [(None,)]
    db.close()
