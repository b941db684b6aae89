"""The `sqlscout` command (also `python -m mcp_server`): serve MCP, ask one question, or print host configuration."""

from __future__ import annotations

import difflib
import json
import logging
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import configargparse
from tqdm import tqdm

from dbtools.access.rule_check import RulesError
from dbtools.engines import Database, open_database
from dbtools.engines.dsn import parse_dsn
from dbtools.errors import ConnectionFailedError, DatabaseToolError
from dbtools.plural import counted
from dbtools.sources import SourceSet
from mcp_server.agent.errors import ModelError, PolicyConfigError
from mcp_server.audit_log import AuditLog, AuditLogError
from mcp_server.config_file import SOURCE_NAME, ConfigFileError, ServerConfig, load_config
from mcp_server.config_reload import ConfigWatcher
from mcp_server.host_config import HOSTS, host_instructions, host_snippet
from mcp_server.http_transport import ListenError, listen_socket, serve_http
from mcp_server.identities import Identities, new_token, token_digest
from mcp_server.model_runner import ModelLoadError, ModelRunner
from mcp_server.secret_redaction import SecretFilter, redact_in_logs
from mcp_server.server import build_server
from mcp_server.settings import OPTIONS, Settings, SettingsError
from mcp_server.shell_quoting import SHELLS, default_shell
from mcp_server.source_tools import server_limits
from mcp_server.stdio_transport import serve_stdio
from mcp_server.terminal_table import format_table
from model.options import add_options

log = logging.getLogger("sqlscout")

COMMANDS = ("ask", "config", "token")
# How long questions still running when serving ends get to stop (the local model checks for a cancel between
# chunks of tokens) before the process ends without them.
QUESTION_STOP_GRACE_S = 3.0
SERVE_EPILOG = """other commands:
  sqlscout ask "QUESTION" [--evidence TEXT] [--json] [options]   answer one question in the terminal
  sqlscout config {claude-desktop,vscode,claude-code} [options]   print a host configuration snippet
  sqlscout token NAME                                             make an identity's bearer token"""


class CommandParser(configargparse.ArgumentParser):
    """A parser whose usage errors are the one line that matters, not the whole usage block before it; a flag or
    command it does not know gets the closest it does. Flags are matched whole: `--max-row` is not `--max-rows`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message += self._closest(message.removeprefix(prefix).split())
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n")

    def _closest(self, words: list[str]) -> str:
        flags = [flag for action in self._actions for flag in action.option_strings]
        for word in words:
            close = difflib.get_close_matches(word.split("=")[0], flags, n=1) if word.startswith("-") else []
            if close:
                return f"; did you mean {close[0]}?"
        plain = [word for word in words if not word.startswith("-")]
        if plain and self.prog == command_name():  # the serve command: a command word mistyped, or left out
            close = difflib.get_close_matches(plain[0], COMMANDS, n=1)
            if close:
                return f"; did you mean `{self.prog} {close[0]}`?"
            if len(plain) > 2 or plain[-1].endswith("?"):
                return f'; to ask a question: {self.prog} ask "{" ".join(plain)}"'
        return ""


def command_name() -> str:
    """How the user started this program: `python -m mcp_server`, or the installed `sqlscout`."""
    return "python -m mcp_server" if Path(sys.argv[0]).name == "__main__.py" else "sqlscout"


def build_parser(command: str) -> configargparse.ArgumentParser:
    """The parser of one command: serve (no command word), ask or config."""
    formatter = configargparse.RawDescriptionHelpFormatter
    program = command_name()
    if command == "ask":
        parser = CommandParser(
            prog=f"{program} ask",
            description="Answer one question with the text-to-SQL model; "
            "progress goes to stderr, the result to stdout.",
            formatter_class=formatter,
        )
        parser.add_argument("question", help="the question, in plain language")
        parser.add_argument("--evidence", help="domain knowledge the question needs")
        parser.add_argument("--json", action="store_true", help="print the whole answer as JSON")
        parser.add_argument(
            "--source",
            env_var="SQLSCOUT_SOURCE",
            help="the configured source to ask (with --config naming several)",
        )
    elif command == "token":
        parser = CommandParser(
            prog=f"{program} token",
            description="Make a random bearer token for an identity and print it with the lines that declare the "
            "identity in the configuration file (which keeps only the token's sha256).",
            formatter_class=formatter,
        )
        parser.add_argument("name", help="the identity's name: lower-case letters, digits, _ and -")
        return parser
    elif command == "config":
        parser = CommandParser(
            prog=f"{program} config",
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
        parser = CommandParser(
            prog=program,
            description="MCP server for read-only natural-language and SQL access to a database.",
            epilog=SERVE_EPILOG,
            formatter_class=formatter,
        )
    add_options(parser, OPTIONS, "settings (flag, or environment variable)")
    return parser


def configure_logging(level: str) -> None:
    """Logs go to stderr: over stdio, stdout carries the protocol."""
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(SecretFilter())
    if level != "DEBUG":
        # httpx logs each request to the model endpoint at INFO; the rounds and any failure are logged already.
        logging.getLogger("httpx").setLevel(logging.WARNING)


def serve(settings: Settings, sources: SourceSet, config: ServerConfig | None) -> int:
    try:
        sock = listen_socket(settings) if settings.transport == "http" else None
    except ListenError as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 1
    try:
        audit = AuditLog(settings.audit_log, settings.audit_log_max_mb) if settings.audit_log else None
    except AuditLogError as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        return 1
    runner = ModelRunner(settings)
    sources.on_close = runner.forget
    identities = Identities(config.identities if config is not None else (), token=settings.token)
    server = build_server(
        settings, sources, runner, named=config is not None, audit=audit, identities=identities
    )
    runner.preload_in_background()
    if not runner.configured:
        log.info("no model configured: ask_database will explain how to set one; the database tools work")
    served = ", ".join(f"{source.name}: {source.display_name} ({source.dialect})" for source in sources)
    log.info("serving %s over %s", served, settings.transport)
    watcher = None
    if config is not None:
        watcher = ConfigWatcher(config.path, partial(apply_reload, sources, config))
        watcher.start()
    try:
        if settings.transport == "http":
            serve_http(server, settings, sock, identities)
        else:
            serve_stdio(server, runner.configured)
    finally:
        if watcher is not None:
            watcher.stop()
        if audit is not None:
            audit.close()
    if not runner.stop(QUESTION_STOP_GRACE_S):
        log.warning(
            "a question was still running %g s after serving ended; exiting without it", QUESTION_STOP_GRACE_S
        )
        # Its worker thread would hold the process open; nothing needs unwinding, the database is only read.
        os._exit(0)
    return 0


def check_rules_at_start(sources: SourceSet, config: ServerConfig) -> None:
    """Check every source's rules, and every identity's on the sources it may use, against the real catalog of
    each source reachable now (RulesError on the first misfit); the others are checked when first reached."""
    for source in sources:
        extras = [None] + [
            i.rules
            for i in config.identities
            if i.rules.active and (i.sources is None or source.name in i.sources)
        ]
        if not source.spec.rules.active and len(extras) == 1:
            continue
        try:
            for extra in extras:
                source.check_rules(extra)
        except ConnectionFailedError as error:
            log.warning(
                "source %s cannot be reached now (%s): its rules are checked when it is", source.name, error
            )


def print_token(parser: configargparse.ArgumentParser, name: str) -> int:
    if not SOURCE_NAME.fullmatch(name):
        parser.error(f"identity name {name!r}: use lower-case letters, digits, '_' and '-'")
    token = new_token()
    print(f"give this token to {name} (it is shown once; the file keeps only its sha256):", file=sys.stderr)
    print(token)
    print(f'\n[identities.{name}]\ntoken_sha256 = "{token_digest(token)}"')
    print('# sources = ["sales"]  # the sources it may use (without this line: every source)')
    return 0


def apply_reload(sources: SourceSet, started: ServerConfig, config: ServerConfig) -> None:
    """Serve a re-read file's sources; [server] settings are read at start only."""
    if not config.sources and started.sources:
        raise ConfigFileError(
            f"{config.path}: sources: the file names no source now; the server keeps serving"
        )
    if config.settings != started.settings:
        log.warning("[server] settings in %s changed: they apply when the server restarts", config.path)
    if config.sources:
        changed = sources.replace(list(config.sources))
        log.info("sources reopened, added or removed: %s", ", ".join(changed) or "none")
    redact_in_logs(config.secrets)


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
    except (PolicyConfigError, ModelLoadError, ModelError, DatabaseToolError) as error:
        print(f"sqlscout: {error}", file=sys.stderr)
        if as_json:  # a script reading stdout gets the failure as JSON too
            print(json.dumps({"error": str(error), "kind": type(error).__name__}, ensure_ascii=False))
        return 2 if isinstance(error, PolicyConfigError) else 1
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


def names_a_file(dsn: str | None) -> bool:
    """Whether --dsn names a database file (SQLite, DuckDB, CSV...) rather than a server to dial."""
    return bool(dsn) and parse_dsn(dsn).engine in ("sqlite", "duckdb")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args and args[0] in COMMANDS else "serve"
    parser = build_parser(command)
    namespace = parser.parse_args(args)
    if command == "token":
        return print_token(parser, namespace.name)
    if command == "ask" and not namespace.question.strip():
        parser.error('the question is empty: ask it in plain language, e.g. "How many orders are there?"')
    flags = {name: value for name, value in vars(namespace).items() if value is not None}
    config = None
    if flags.get("config"):
        try:
            config = load_config(flags["config"])
        except ConfigFileError as error:
            parser.error(str(error))
        if config.sources and flags.get("dsn"):
            parser.error(f"--dsn and the sources of {config.path} both name databases: give one or the other")
        redact_in_logs(config.secrets)
    from_file = config.settings if config is not None and command != "config" else {}
    try:
        Settings.resolve(from_file)
    except SettingsError as error:
        parser.error(f"{config.path}: [server]: {error}")
    try:
        settings = Settings.resolve({**from_file, **flags})
        settings.check_authentication(len(config.identities) if config is not None else 0)
    except SettingsError as error:
        parser.error(str(error))
    configure_logging(settings.log_level)
    if command == "config":
        try:
            # A host would start the server on a file that is not there; a server DSN is not dialled from here.
            if names_a_file(settings.dsn):
                open_database(settings.dsn).close()
        except DatabaseToolError as error:
            parser.error(str(error))
        if namespace.target == "claude-desktop" and settings.transport == "http":
            log.warning("Claude Desktop starts local servers itself, over stdio: the snippet does that")
        # Only the snippet goes to stdout, so that it can be piped into a file or a shell.
        print(host_instructions(namespace.target, settings, namespace.shell), file=sys.stderr)
        if config is not None and config.secret_variables:
            print(
                f"{config.path} reads {', '.join(config.secret_variables)} from the environment, and a host starts "
                "the server without your shell's: give each in the host's \"env\" for the server, or use "
                "password_file (a source whose variable is not set is served as unusable, with the reason)",
                file=sys.stderr,
            )
        print(host_snippet(namespace.target, settings, namespace.name, namespace.shell))
        return 0
    if config is not None and config.sources:
        sources = SourceSet(list(config.sources), server_limits(settings))
        for spec in config.sources:
            if spec.unusable is not None:
                log.warning("source %s is served as unusable: %s", spec.name, spec.unusable)
        try:
            check_rules_at_start(sources, config)
        except RulesError as error:
            sources.close()
            print(f"sqlscout: {config.path}: {error}", file=sys.stderr)
            return 2
    else:
        try:
            # A lone database is opened now: a server with nothing it can serve should not start.
            db = open_database(
                settings.dsn,
                timeout_s=settings.timeout,
                max_rows=settings.max_rows,
                connect_timeout_s=settings.connect_timeout,
                pool_size=settings.pool_size,
            )
        except DatabaseToolError as error:
            if names_a_file(settings.dsn):  # the flag's value is wrong: a usage error, as in `config`
                parser.error(str(error))
            print(f"sqlscout: {error}", file=sys.stderr)
            return 1
        sources = SourceSet.serving(db, server_limits(settings))
    try:
        if command == "ask":
            try:
                db = sources.get(namespace.source).database()
            except DatabaseToolError as error:
                print(f"sqlscout: {error}", file=sys.stderr)
                return 1
            return ask(settings, db, namespace.question, namespace.evidence, namespace.json)
        return serve(settings, sources, config)
    except KeyboardInterrupt:
        return 130
    finally:
        sources.close()
