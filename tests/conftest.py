"""Session fixtures shared by the whole suite: the Triton interpreter switch, a real PostgreSQL, MariaDB and OpenSSH
server, a cache directory of the run's own, and the fixture database (tests/fixture_schema.py) on every engine;
the list of slow tests that the fast tier leaves out; and how the suite shares the cores among pytest-xdist's
workers."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import torch

# The interpreter must be chosen before any @triton.jit function is defined, i.e. before kernels import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist the workers share the cores: each worker, and the servers and engines its tests start, takes
# its share of threads, so that the workers' products do not oversubscribe them.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

import pytest  # noqa: E402

# The database fixtures import the database packages (psycopg, DuckDB, PyMySQL, sqlglot) where they are used: the GPU
# machine runs tests/kernels through this file and has none of them.

SUBPROCESS_SERVERS = "starts sqlscout servers in subprocesses"
# What the fast tier (`-m "not slow"`, scripts/test.sh --fast) leaves out: a test file, or one test of a file (every
# parameter of it), and why it is slow.
SLOW = {
    "tests/kernels/test_gated_delta_rule.py::test_chunked_matches_fused_recurrent_and_token_loop": (
        "three chunked kernels over 64-130 tokens in the Triton interpreter"
    ),
    "tests/benchmarks/test_bad_settings.py::test_a_bad_environment_value_is_a_usage_error": (
        "starts each benchmark in a subprocess"
    ),
    "tests/dbtools/test_engines.py::test_a_schema_check_is_reused_for_the_engines_interval": (
        "waits out the schema check's interval"
    ),
    "tests/dbtools/test_engines.py::test_a_sqlite_file_locked_by_a_writer_is_a_clear_error_within_the_timeout": (
        "waits out a query timeout"
    ),
    "tests/model/test_draft_head.py::test_random_head_drafts_change_no_token_and_no_state": (
        "generations with a draft head, plain and speculative"
    ),
    "tests/model/test_draft_head.py::test_a_head_whose_drafts_do_not_pay_is_left_idle_and_caught_up_later": (
        "generations with a draft head, plain and speculative"
    ),
    "tests/model/test_draft_head.py::test_the_heads_cache_equals_one_pass_over_the_sequence": (
        "a speculative generation and a second prefill"
    ),
    "tests/model/test_speculative.py::test_sampled_tokens_follow_the_distribution_of_plain_sampling": (
        "800 sampled generations"
    ),
    "tests/model/test_speculative.py::test_mid_size_greedy_over_hundreds_of_tokens": "a mid-size checkpoint",
    "tests/model/test_cli.py::test_speculation_reports_its_verify_passes_and_changes_no_token": (
        "two engines and 400 tokens through the CLI"
    ),
    "tests/benchmarks/test_llama_cpp.py::test_a_checkpoint_with_a_dummy_tokenizer_is_converted_from_links_with_the_real_qwen_tokenizer": (
        "writes a checkpoint and the real tokenizer's files"
    ),
    "tests/benchmarks/test_evaluate.py::test_every_gold_query_of_the_demo_set_returns_rows": (
        "every gold query on the full demo database"
    ),
    "tests/kernels/test_compile_targets.py": "compiles 124 kernels for six GPU targets (minutes on a first run)",
    "tests/kernels/test_kernel_builds.py::test_the_kernels_compile_with_each_compiler": (
        "compiles the C++ kernels at every instruction-set level with each compiler (about 2 minutes on 2 cores)"
    ),
    "tests/model/test_cli.py::test_a_capped_instruction_set_builds_and_runs_that_level": "builds the AVX2 kernels",
    "tests/kernels/test_cpu_isa.py::test_every_other_level_matches_the_reference": (
        "builds the C++ kernels once more per instruction-set level"
    ),
    "tests/model/test_compiled_decode.py::test_compiled_decoding_matches_eager_decoding": "torch.compile",
    "tests/model/test_compiled_decode.py::test_warming_up_compiles_the_step_a_later_session_of_one_row_runs": (
        "torch.compile"
    ),
    "tests/model/test_real_shapes.py": "Qwen3.5-2B's layer shapes in bf16",
    "tests/model/test_cli.py::test_json_output_with_greedy_decoding": "loads a model in a subprocess",
    "tests/model/test_cpu_weights.py::test_quantized_logits_stay_close_to_the_fp32_ones": (
        "quantizes a head of the real vocabulary"
    ),
    "tests/model/test_cpu_weights.py::test_quantized_weights_are_kept_and_read_back_instead_of_quantized_again": (
        "quantizes a head of the real vocabulary"
    ),
    "tests/agent/test_local_batching.py": "decodes batches of questions with a tiny model",
    "tests/benchmarks/test_concurrency.py::test_a_replayed_reply_is_decoded_token_by_token_in_the_batch": (
        "runs the concurrency benchmark's local engine"
    ),
    "tests/benchmarks/test_concurrency.py::test_a_run_reports_each_size_with_ratios_against_one_after_another": (
        "runs the concurrency benchmark"
    ),
    "tests/server/test_light_install.py": "builds the wheel and a virtual environment",
    "tests/server/test_inspector_cli.py": "installs the MCP Inspector from npm and starts a server per call",
    "tests/server/test_quickstart.py::test_the_readme_quickstart_reaches_a_tools_call": "installs a fresh checkout's .venv",
    "tests/benchmarks/test_gpu_machine_imports.py::test_the_ask_episode_runs_without_the_server_packages": (
        "runs the GPU suite's ask episode in a subprocess"
    ),
    "tests/benchmarks/test_agent_episode.py::test_forced_replay_runs_every_token_once_and_counts_the_resend_peer": (
        "an episode on the full demo database"
    ),
    "tests/dbtools/test_demo.py::test_default_demo_is_cached_by_generator_version": "the full demo database",
    "tests/dbtools/test_demo.py::test_demo_has_many_tables_and_rows": "the full demo database",
    "tests/dbtools/test_demo.py::test_every_foreign_key_resolves": "the full demo database",
    "tests/dbtools/test_demo.py::test_demo_has_nulls_skew_and_grounding_values": "the full demo database",
    "tests/dbtools/test_demo.py::test_create_table_text_mixes_real_styles": "the full demo database",
    "tests/dbtools/test_demo.py::test_load_postgres_copies_every_table": "loads the demo into PostgreSQL twice",
    "tests/dbtools/test_demo.py::test_load_mysql_copies_every_table": "loads the demo into MariaDB twice",
    "tests/dbtools/test_demo.py::test_load_duckdb_copies_every_table": "loads the demo into DuckDB twice",
    "tests/benchmarks/test_gpu_machine_imports.py::test_the_speculative_benchmark_runs_without_the_server_packages": (
        "episodes of a random model on the CPU, plain and speculative"
    ),
    "tests/benchmarks/test_evaluate.py::test_tiny_random_model_episodes_end_cleanly": (
        "episodes of a random model on the CPU"
    ),
    "tests/dbtools/test_attacks.py::test_the_engine_refuses_writes_even_without_the_parser_check": (
        "the attack matrix run on the engines, some attacks until their timeout"
    ),
    "tests/faults/test_postgres_faults.py::test_a_restart_under_load_gives_clear_errors_and_no_stall": (
        "restarts the PostgreSQL server"
    ),
    "tests/faults/test_endpoint_faults.py": SUBPROCESS_SERVERS,
    "tests/faults/test_hangups.py": SUBPROCESS_SERVERS,
    "tests/benchmarks/test_gpu_machine_imports.py::test_the_profile_and_the_checks_run_without_the_server_packages": (
        "two benchmarks in subprocesses, the checks through the Triton interpreter"
    ),
    "tests/benchmarks/test_gpu_checks.py::test_the_checks_pass_on_a_cpu_at_tiny_shapes": (
        "three tiny engines' prefill and decode, one through the Triton interpreter"
    ),
    "tests/server/test_audit_log.py::test_sixteen_clients_at_once_lose_no_line_and_interleave_none": (
        SUBPROCESS_SERVERS
    ),
    "tests/server/test_cli.py": SUBPROCESS_SERVERS,
    "tests/server/test_concurrency_http.py": SUBPROCESS_SERVERS,
    "tests/server/test_http.py": SUBPROCESS_SERVERS,
    "tests/server/test_identities.py": SUBPROCESS_SERVERS,
    "tests/server/test_local_concurrency_http.py": SUBPROCESS_SERVERS,
    "tests/server/test_sources.py": SUBPROCESS_SERVERS,
    "tests/server/test_stdio.py": SUBPROCESS_SERVERS,
    "tests/server/test_stdio_pipes.py": SUBPROCESS_SERVERS,
    "tests/server/test_stdio_transport.py": SUBPROCESS_SERVERS,
}


MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core, at most MAX_WORKERS (each starts its own database servers)."""
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


@pytest.fixture(scope="session", autouse=True)
def run_cache_dir(tmp_path_factory):
    """SQLSCOUT_CACHE_DIR for the whole run: the demo database and value indexes that tests build go to a
    temporary folder, never into the user's ~/.cache/sqlscout. Subprocess helpers pass it on."""
    path = tmp_path_factory.mktemp("sqlscout-cache")
    previous = os.environ.get("SQLSCOUT_CACHE_DIR")
    os.environ["SQLSCOUT_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        del os.environ["SQLSCOUT_CACHE_DIR"]
    else:
        os.environ["SQLSCOUT_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def pg_server_dsn():
    """DSN of an empty throwaway PostgreSQL server; SQLSCOUT_TEST_PG_DSN points at an existing one instead.

    A server that cannot start fails the tests that need it: PostgreSQL tests are never skipped.
    """
    existing = os.environ.get("SQLSCOUT_TEST_PG_DSN")
    if existing:
        yield existing
        return
    from benchmarks.servers.postgres import PostgresServer

    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_server_dsn():
    """DSN (root, no database named) of a throwaway MariaDB server; SQLSCOUT_TEST_MYSQL_DSN points at an existing
    MySQL or MariaDB server instead.

    A server that cannot start fails the tests that need it: MySQL tests are never skipped.
    """
    existing = os.environ.get("SQLSCOUT_TEST_MYSQL_DSN")
    if existing:
        yield existing.rstrip("/")
        return
    from benchmarks.servers.mariadb import MariaDBServer

    server = MariaDBServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd():
    """A throwaway OpenSSH server on loopback (Debian's openssh-server); tests may kill and start it again.

    A server that cannot start fails the tests that need it: SSH tests are never skipped.
    """
    from benchmarks.servers.sshd import SshServer

    server = SshServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def running_sshd(sshd):
    """The session's sshd, started again if an earlier test left it down."""
    if not sshd.running:
        sshd.start()
    return sshd


@pytest.fixture(scope="session")
def demo_database(run_cache_dir) -> Path:
    """The default demo database, built once per run through default_demo_path() into the run's cache directory,
    where open_database(None) and the servers that tests start find it."""
    from dbtools.demo import default_demo_path

    previous = os.environ["SQLSCOUT_CACHE_DIR"]
    os.environ["SQLSCOUT_CACHE_DIR"] = str(run_cache_dir)  # a test may point it elsewhere for the moment
    try:
        return default_demo_path()
    finally:
        os.environ["SQLSCOUT_CACHE_DIR"] = previous


# The fixture database on each engine, built once per run. Tests only read it; one that changes it puts it back.
@pytest.fixture(scope="session")
def sqlite_dsn(tmp_path_factory) -> str:
    from tests.fixture_schema import build_sqlite

    path = tmp_path_factory.mktemp("sqlite-fixture") / "fixture.sqlite"
    build_sqlite(str(path))
    return str(path)


@pytest.fixture(scope="session")
def postgres_dsn(pg_server_dsn) -> str:
    """A uniquely named database in the session's PostgreSQL server, dropped at the end of the run."""
    import psycopg

    from tests.fixture_schema import build_postgres

    name = f"sqlscout_fixture_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server_dsn.rsplit("/", 1)[0] + f"/{name}"
    try:
        build_postgres(dsn)
        yield dsn
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mysql_dsn(mariadb_server_dsn) -> str:
    """A uniquely named database in the session's MariaDB server, dropped at the end of the run."""
    from tests.fixture_schema import build_mysql, mysql_connection

    name = f"sqlscout_fixture_{uuid.uuid4().hex[:10]}"
    with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    dsn = f"{mariadb_server_dsn}/{name}"
    try:
        build_mysql(dsn)
        yield dsn
    finally:
        with mysql_connection(f"{mariadb_server_dsn}/mysql") as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")


@pytest.fixture(scope="session")
def duckdb_dsn(tmp_path_factory) -> str:
    from tests.fixture_schema import build_duckdb

    path = tmp_path_factory.mktemp("duckdb-fixture") / "fixture.duckdb"
    build_duckdb(str(path))
    return str(path)


@pytest.fixture(scope="session")
def csv_dsn(tmp_path_factory) -> str:
    """The fixture tables as a folder of CSV files, one per table with a header line, opened by DuckDB (no keys:
    CSV has none)."""
    from tests.fixture_schema import write_csv_folder

    folder = tmp_path_factory.mktemp("csv-fixture")
    write_csv_folder(folder)
    return str(folder)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Marks the tests SLOW names as slow; an entry naming a test that its module no longer has is an error, so
    that a renamed test cannot drop out of the fast tier's list unnoticed."""
    modules = {}
    for item in items:
        path, _, rest = item.nodeid.partition("::")
        modules[path] = item.module
        if path in SLOW or f"{path}::{rest.split('[')[0]}" in SLOW:
            item.add_marker(pytest.mark.slow)
    stale = [
        key
        for key in SLOW
        if "::" in key
        and key.split("::")[0] in modules
        and not hasattr(modules[key.split("::")[0]], key.split("::")[1])
    ]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW names tests that do not exist: {', '.join(stale)}")
