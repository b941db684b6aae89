"""The `sqlscout` command (also `python -m mcp_server`): serve MCP, ask one question, or print host configuration."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

import configargparse
from tqdm import tqdm

from dbtools.engines import Database, open_database
from dbtools.engines.dsn import parse_dsn
from dbtools.errors import DatabaseToolError
from dbtools.plural import counted
from mcp_server.agent.errors import ModelError, PolicyConfigError
from mcp_server.host_config import HOSTS, host_instructions, host_snippet
from mcp_server.http_transport import ListenError, listen_socket, serve_http
from mcp_server.model_runner import ModelLoadError, ModelRunner
from mcp_server.server import build_server
from mcp_server.settings import OPTIONS, Settings, SettingsError
from mcp_server.shell_quoting import SHELLS, default_shell
from mcp_server.stdio_transport import serve_stdio
from mcp_server.terminal_table import format_table

log = logging.getLogger("sqlscout")

COMMANDS = ("ask", "config")
# How long questions still running when serving ends get to stop (the local model checks for a cancel between
# chunks of tokens) before the process ends without them.
QUESTION_STOP_GRACE_S = 3.0
SERVE_EPILOG = """other commands:
  sqlscout ask "QUESTION" [--evidence TEXT] [--json] [options]   answer one question in the terminal
  sqlscout config {claude-desktop,vscode,claude-code} [options]   print a host configuration snippet"""


def add_settings_options(parser: configargparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (flag, or environment variable)")
    for option in OPTIONS:
        kinds = (
            {"action": argparse.BooleanOptionalAction}
            if option.switch
            else {"type": option.parse, "choices": option.choices, "metavar": option.metavar}
        )
        group.add_argument(
            option.flag,
            dest=option.field,
            default=None,  # Settings holds the defaults
            env_var=option.env,
            help=option.help,
            **kinds,
        )


def build_parser(command: str) -> configargparse.ArgumentParser:
    """The parser of one command: serve (no command word), ask or config."""
    formatter = configargparse.RawDescriptionHelpFormatter
    if command == "ask":
        parser = configargparse.ArgumentParser(
            prog="sqlscout ask",
            description="Answer one question with the text-to-SQL model; "
            "progress goes to stderr, the result to stdout.",
            formatter_class=formatter,
        )
        parser.add_argument("question", help="the question, in plain language")
        parser.add_argument("--evidence", help="domain knowledge the question needs")
        parser.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    elif command == "config":
        parser = configargparse.ArgumentParser(
            prog="sqlscout config",
            description="Print the configuration that makes a host start this server with the given options.",
            formatter_class=formatter,
        )
        parser.add_argument("target", choices=HOSTS, help="the MCP host to configure")
        parser.add_argument(
            "--name",
            default="sqlscout",
            env_var="SQLSCOUT_CONFIG_NAME",
            help="the server's name in the host (default sqlscout)",
        )
        parser.add_argument(
            "--shell",
            choices=SHELLS,
            default=default_shell(),
            env_var="SQLSCOUT_CONFIG_SHELL",
            help=f"the shell claude-code's command is quoted for (default here {default_shell()})",
        )
    else:
        parser = configargparse.ArgumentParser(
            prog="sqlscout",
            description="MCP server for read-only natural-language and SQL access to a database.",
            epilog=SERVE_EPILOG,
            formatter_class=formatter,
        )
    add_settings_options(parser)
    return parser


def configure_logging(level: str) -> None:
    """Logs go to stderr: over stdio, stdout carries the protocol."""
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    if level != "DEBUG":
        # httpx logs each request to the model endpoint at INFO; the rounds and any failure are logged already.
        logging.getLogger("httpx").setLevel(logging.WARNING)


def serve(settings: Settings, db: Database) -> int:
    try:
        sock = listen_socket(settings) if settings.transport == "http" else None
    except ListenError as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 1
    runner = ModelRunner(settings, db)
    server = build_server(settings, db, runner)
    runner.preload_in_background()
    if not runner.configured:
        log.info("no model configured: ask_database will explain how to set one; the database tools work")
    log.info("serving %s (%s) over %s", db.display_name, db.dialect, settings.transport)
    if settings.transport == "http":
        serve_http(server, settings, sock)
    else:
        serve_stdio(server)
    if not runner.stop(QUESTION_STOP_GRACE_S):
        log.warning(
            "a question was still running %g s after serving ended; exiting without it", QUESTION_STOP_GRACE_S
        )
        # Its worker thread would hold the process open; nothing needs unwinding, the database is only read.
        os._exit(0)
    return 0


def ask(settings: Settings, db: Database, question: str, evidence: str | None, as_json: bool) -> int:
    runner = ModelRunner(settings, db)
    # delay: the bar appears with the first round, once its total is known
    bar = tqdm(desc="exploring", unit="round", file=sys.stderr, dynamic_ncols=True, delay=1.0)

    def on_round(event) -> None:
        bar.total = event.max_rounds
        bar.update(event.round - bar.n)
        bar.set_postfix_str(counted(len(event.calls), "tool call"))

    try:
        answer = runner.ask(question, evidence, on_round=on_round)
    except PolicyConfigError as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 2
    except (ModelLoadError, ModelError, DatabaseToolError) as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 1
    finally:
        bar.close()
    data = answer.to_dict()
    if as_json:
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    more = " (more exist)" if data["truncated"] else ""
    print(f"-- {data['ending']}, {counted(data['row_count'], 'row')}{more}")
    print(data["sql"] or "(no SQL)")
    if data["error"]:
        print(f"error: {data['error']}")
    if data["columns"]:
        print()
        print(format_table(data["columns"], data["rows"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args and args[0] in COMMANDS else "serve"
    parser = build_parser(command)
    namespace = parser.parse_args(args)
    if command == "ask" and not namespace.question.strip():
        parser.error('the question is empty: ask it in plain language, e.g. "How many orders are there?"')
    try:
        settings = Settings.resolve(vars(namespace))
    except SettingsError as error:
        parser.error(str(error))
    configure_logging(settings.log_level)
    if command == "config":
        try:
            # A host would start the server on a file that is not there; a server DSN is not dialled from here.
            if settings.dsn and parse_dsn(settings.dsn).engine in ("sqlite", "duckdb"):
                open_database(settings.dsn).close()
        except DatabaseToolError as error:
            parser.error(str(error))
        if namespace.target == "claude-desktop" and settings.transport == "http":
            log.warning("Claude Desktop starts local servers itself, over stdio: the snippet does that")
        # Only the snippet goes to stdout, so that it can be piped into a file or a shell.
        print(host_instructions(namespace.target, settings, namespace.shell), file=sys.stderr)
        print(host_snippet(namespace.target, settings, namespace.name, namespace.shell))
        return 0
    try:
        db = open_database(
            settings.dsn,
            timeout_s=settings.timeout,
            max_rows=settings.max_rows,
            connect_timeout_s=settings.connect_timeout,
            pool_size=settings.pool_size,
        )
    except DatabaseToolError as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 1
    try:
        if command == "ask":
            return ask(settings, db, namespace.question, namespace.evidence, namespace.json)
        return serve(settings, db)
    except KeyboardInterrupt:
        return 130
    finally:
        db.close()
