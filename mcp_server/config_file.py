"""The configuration file (`--config FILE`, TOML): named sources, their secrets from the environment or files,
their SSH tunnels, and any server setting under [server]."""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot

from dbtools.access.rules import VisibilityRules
from dbtools.engines.dsn import parse_dsn
from dbtools.errors import ConnectionFailedError, first_line
from dbtools.source_dsn import SERVER_ENGINES
from dbtools.sources import SourceSpec
from dbtools.ssh_tunnel import DEFAULT_KNOWN_HOSTS, DEFAULT_SSH_PORT, SshSettings, parse_jump
from mcp_server.identities import IdentitySpec, token_digest
from mcp_server.settings import OPTIONS, Option

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SOURCE_NAME = re.compile(r"[a-z0-9_-]+")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# [server] takes every setting but the database, which [sources] names, and the file itself.
SERVER_OPTIONS = {option.field: option for option in OPTIONS if option.field not in ("dsn", "config")}


class ConfigFileError(ValueError):
    """The file cannot be used; the message names the file, the key and what was expected."""


@dataclass(frozen=True)
class Key:
    """One key of a table in the file: its type, whether it must be there, and the smallest value allowed."""

    kind: type | tuple[type, ...]
    expected: str
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None


SSH_KEYS = {
    "host": Key(str, "a host name", required=True),
    "port": Key(int, "a port number", minimum=1, maximum=65535),
    "user": Key(str, "a user name"),
    "key_file": Key(str, "the path of a private key"),
    "known_hosts": Key(str, "the path of a known_hosts file"),
    "jump": Key(str, "[user@]host[:port] of a jump host"),
}
SOURCE_KEYS = {
    "dsn": Key(str, "a DSN (a file path, sqlite:///..., postgresql://..., mysql://...)", required=True),
    "description": Key(str, "a one-line description"),
    "password": Key(str, 'a password, e.g. "${SALES_PASSWORD}"'),
    "password_file": Key(str, "the path of a file holding the password"),
    "timeout": Key((int, float), "a number of seconds above 0", minimum=1e-9),
    "max_rows": Key(int, "a number of rows, at least 1", minimum=1),
    "pool_size": Key(int, "a number of connections, at least 1", minimum=1),
    "connect_timeout": Key(int, "a number of seconds, at least 2", minimum=2),
    "ssh": Key(dict, "a table: { host = ..., user = ..., key_file = ... }"),
    "tables": Key(list, 'a list of table patterns, e.g. ["public.*"]'),
    "hidden_tables": Key(list, 'a list of table patterns, e.g. ["*_audit"]'),
    "hidden_columns": Key(list, 'a list of table.column patterns, e.g. ["*.password_hash"]'),
    "row_filters": Key(dict, "a table: { orders = \"region = 'EU'\" }"),
}
RULE_LISTS = ("tables", "hidden_tables", "hidden_columns")


IDENTITY_KEYS = {
    "token_sha256": Key(str, "the sha256 of the token, 64 hex digits (python -m mcp_server token NAME)"),
    "token": Key(str, 'the token itself, e.g. "${ANALYST_TOKEN}"'),
    "sources": Key(list, "a list of source names"),
    "hidden_tables": SOURCE_KEYS["hidden_tables"],
    "hidden_columns": SOURCE_KEYS["hidden_columns"],
    "row_filters": SOURCE_KEYS["row_filters"],
}


@dataclass(frozen=True)
class ServerConfig:
    """What the file says: [server] settings by field name, the sources, the identities and every secret value
    it holds."""

    path: Path
    settings: dict[str, Any]
    sources: tuple[SourceSpec, ...]
    secrets: frozenset[str]
    identities: tuple[IdentitySpec, ...] = ()
    secret_variables: tuple[str, ...] = ()  # the environment variables its secrets are read from


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Read and check `path`; raise ConfigFileError on the first problem."""
    return _Reader(Path(path).expanduser().resolve(), os.environ if environ is None else environ).read()


class _Reader:
    def __init__(self, path: Path, environ: Mapping[str, str]) -> None:
        self.path = path
        self.environ = environ
        self.secrets: set[str] = set()
        self.secret_variables: dict[str, None] = {}  # in the file's order

    def fail(self, key: str, problem: str) -> ConfigFileError:
        return ConfigFileError(f"{self.path}: {key}: {problem}")

    def read(self) -> ServerConfig:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigFileError(
                f"cannot read the configuration file {self.path}: {error.strerror}"
            ) from None
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigFileError(f"{self.path}: not valid TOML: {error}") from None
        self.check_keys(document, "", {"server": dict, "sources": dict, "identities": dict})
        settings = self.server_settings(document.get("server", {}))
        sources = document.get("sources", {})
        specs = tuple(self.source(name, table) for name, table in sources.items())
        names = [spec.name for spec in specs]
        identities = tuple(
            self.identity(name, table, names) for name, table in document.get("identities", {}).items()
        )
        return ServerConfig(
            self.path, settings, specs, frozenset(self.secrets), identities, tuple(self.secret_variables)
        )

    def identity(self, name: str, table: Any, sources: list[str]) -> IdentitySpec:
        prefix = f"identities.{name}"
        if not SOURCE_NAME.fullmatch(name):
            raise self.fail(prefix, "an identity's name is lower-case letters, digits, '_' and '-'")
        if not isinstance(table, dict):
            raise self.fail(prefix, f"expected a table ([{prefix}]), got {_shown(table)}")
        values = self.checked(table, prefix, IDENTITY_KEYS, f"identity {name!r}", secret_keys=("token",))
        if ("token" in values) == ("token_sha256" in values):
            raise self.fail(prefix, "give token_sha256 (or token), exactly one of them")
        digest = values.get("token_sha256")
        if digest is None:
            digest = token_digest(values["token"])
        elif not SHA256_HEX.fullmatch(digest.lower()):
            raise self.fail(f"{prefix}.token_sha256", "expected 64 hex digits, the sha256 of the token")
        allowed = values.get("sources")
        if allowed is not None:
            for index, source in enumerate(allowed):
                if not isinstance(source, str):
                    raise self.fail(
                        f"{prefix}.sources[{index}]", f"expected a source name, got {_shown(source)}"
                    )
                if source not in sources:
                    known = ", ".join(sources) or "none"
                    raise self.fail(f"{prefix}.sources[{index}]", f"no source {source!r}; sources: {known}")
        rules = self.rules(values, prefix, None)
        return IdentitySpec(name, digest.lower(), tuple(allowed) if allowed is not None else None, rules)

    def check_keys(self, table: dict, prefix: str, allowed: Mapping[str, object]) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise self.fail(f"{prefix}{key}", f"unknown key; {hint}expected one of {', '.join(allowed)}")
        for key, kind in allowed.items():
            if kind is dict and key in table and not isinstance(table[key], dict):
                raise self.fail(
                    f"{prefix}{key}", f"expected a table ([{prefix}{key}]), got {_shown(table[key])}"
                )

    def server_settings(self, table: dict) -> dict[str, Any]:
        self.check_keys(table, "server.", SERVER_OPTIONS)
        return {
            key: self.server_value(SERVER_OPTIONS[key], f"server.{key}", value)
            for key, value in table.items()
        }

    def server_value(self, option: Option, key: str, value: Any) -> Any:
        if option.switch:
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {_shown(value)}")
            return value
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail(key, f"expected {_option_kind(option)}, got {_shown(value)}")
        if isinstance(value, str):
            value = self.interpolate(value, key, "the server", secret=option.secret)
        if option.parse is str and not isinstance(value, str):
            raise self.fail(key, f"expected {_option_kind(option)}, got {_shown(value)}")
        try:
            parsed = option.parse(str(value)) if option.parse is not str else value
        except ValueError:
            raise self.fail(key, f"expected {_option_kind(option)}, got {_shown(value)}") from None
        if option.choices and parsed not in option.choices:
            raise self.fail(key, f"expected one of {', '.join(option.choices)}, got {_shown(value)}")
        return parsed

    def source(self, name: str, table: Any) -> SourceSpec:
        prefix = f"sources.{name}"
        if not SOURCE_NAME.fullmatch(name):
            raise self.fail(prefix, "a source's name is lower-case letters, digits, '_' and '-'")
        if not isinstance(table, dict):
            raise self.fail(prefix, f"expected a table ([{prefix}]), got {_shown(table)}")
        unset: list[str] = []  # a password variable not set: this source is unusable, the others are served
        values = self.checked(table, prefix, SOURCE_KEYS, f"source {name!r}", unset_secrets=unset)
        try:
            engine = parse_dsn(values["dsn"]).engine
        except ConnectionFailedError as error:
            raise self.fail(f"{prefix}.dsn", str(error)) from None
        if engine not in SERVER_ENGINES:
            for key in ("password", "password_file", "pool_size", "connect_timeout", "ssh"):
                if key in table:  # the table's keys: a password whose variable is not set is not in values
                    raise self.fail(
                        f"{prefix}.{key}", f"applies to PostgreSQL and MySQL sources, not {engine}"
                    )
            values["dsn"] = self.file_dsn(values["dsn"], engine, f"{prefix}.dsn")
            # A relative folder is told apart from a SQLite file only once it is read from the file's folder.
            engine = parse_dsn(values["dsn"]).engine
        password = values.get("password")
        if "password_file" in values:
            if password is not None:
                raise self.fail(f"{prefix}.password_file", "give password or password_file, not both")
            password = self.password_from_file(values["password_file"], f"{prefix}.password_file")
        if password is not None:
            self.secrets.add(password)
        ssh = values.get("ssh")
        rules = self.rules(values, prefix, engine)
        return SourceSpec(
            name=name,
            dsn=values["dsn"],
            description=values.get("description", ""),
            password=password,
            timeout=values.get("timeout"),
            max_rows=values.get("max_rows"),
            pool_size=values.get("pool_size"),
            connect_timeout=values.get("connect_timeout"),
            ssh=self.ssh(ssh, f"{prefix}.ssh", name) if ssh is not None else None,
            rules=rules,
            unusable=unset[0] if unset else None,
        )

    def rules(self, values: dict[str, Any], prefix: str, dialect: str | None) -> VisibilityRules:
        """A source's (or an identity's) hidden tables, columns and row filters, each pattern and condition
        checked; an identity's conditions, for sources of any dialect, are checked in sqlglot's own."""
        lists = {}
        for key in RULE_LISTS:
            patterns = values.get(key, [])
            for index, pattern in enumerate(patterns):
                if not isinstance(pattern, str) or not pattern.strip():
                    raise self.fail(f"{prefix}.{key}[{index}]", f"expected a pattern, got {_shown(pattern)}")
                if key == "hidden_columns" and "." not in pattern:
                    raise self.fail(f"{prefix}.{key}[{index}]", f"expected table.column, got {pattern!r}")
            lists[key] = tuple(patterns)
        filters = []
        for table, condition in values.get("row_filters", {}).items():
            key = f"{prefix}.row_filters.{table}"
            if not isinstance(condition, str):
                raise self.fail(key, f"expected an SQL condition, got {_shown(condition)}")
            try:
                sqlglot.parse_one(condition, read=dialect)
            except sqlglot.errors.ParseError as error:
                what = f"{dialect} condition" if dialect else "condition"
                raise self.fail(key, f"not a valid {what}: {first_line(error)}") from None
            filters.append((table, condition))
        return VisibilityRules(row_filters=tuple(filters), origin=prefix, **lists)

    def checked(
        self,
        table: dict,
        prefix: str,
        keys: Mapping[str, Key],
        owner: str,
        secret_keys: tuple[str, ...] = ("password",),
        unset_secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """`table`'s values, types and bounds checked and ${VAR}s replaced. A secret whose variable is not set is
        an error, or, given `unset_secrets`, left out with the error appended there."""
        self.check_keys(table, f"{prefix}.", {k: (dict if v.kind is dict else Key) for k, v in keys.items()})
        values: dict[str, Any] = {}
        for key, spec in keys.items():
            path = f"{prefix}.{key}"
            if key not in table:
                if spec.required:
                    raise self.fail(path, f"missing; expected {spec.expected}")
                continue
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, spec.kind):
                raise self.fail(path, f"expected {spec.expected}, got {_shown(value)}")
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(path, f"expected {spec.expected}, got {_shown(value)}")
            if isinstance(value, str):
                try:
                    value = self.interpolate(value, path, owner, secret=key in secret_keys)
                except ConfigFileError as error:
                    if unset_secrets is None or key not in secret_keys:
                        raise
                    problem = str(error).removeprefix(f"{self.path}: ")
                    unset_secrets.append(
                        f'{problem}: set it where the server starts (a host\'s "env"), or use password_file'
                    )
                    continue
            if spec.minimum is not None and not value >= spec.minimum:
                raise self.fail(path, f"expected {spec.expected}, got {_shown(value)}")
            if spec.maximum is not None and value > spec.maximum:
                raise self.fail(path, f"expected {spec.expected}, got {_shown(value)}")
            values[key] = value
        return values

    def interpolate(self, value: str, key: str, owner: str, secret: bool) -> str:
        """Replace each ${VAR} with the variable's value; an unset one is an error naming it."""

        def variable(match: re.Match) -> str:
            name = match.group(1)
            if secret:
                self.secret_variables[name] = None
            if name not in self.environ:
                raise self.fail(key, f"environment variable {name} is not set (needed by {owner})")
            return self.environ[name]

        result = VARIABLE.sub(variable, value)
        if secret:
            self.secrets.add(result)
        return result

    def ssh(self, table: dict, prefix: str, source: str) -> SshSettings:
        values = self.checked(table, prefix, SSH_KEYS, f"source {source!r}")
        if "jump" in values:
            try:
                parse_jump(values["jump"])
            except ValueError as error:
                raise self.fail(f"{prefix}.jump", str(error)) from None
        for key in ("key_file", "known_hosts"):
            if key in values:
                values[key] = str(self.relative_path(values[key]))
        return SshSettings(
            host=values["host"],
            port=values.get("port", DEFAULT_SSH_PORT),
            user=values.get("user"),
            key_file=values.get("key_file"),
            known_hosts=values.get("known_hosts", DEFAULT_KNOWN_HOSTS),
            jump=values.get("jump"),
        )

    def relative_path(self, text: str) -> Path:
        """A path in the file: `~` expanded, a relative one taken from the file's folder (hosts start anywhere)."""
        path = Path(text).expanduser()
        return path if path.is_absolute() else self.path.parent / path

    def file_dsn(self, dsn: str, engine: str, key: str) -> str:
        """A file source's DSN with its path made absolute against the file's folder; the path must exist."""
        target = parse_dsn(dsn).target
        absolute = self.relative_path(target)
        if not absolute.exists():
            where = (
                ""
                if Path(target).expanduser().is_absolute()
                else f" (a relative path is read from {self.path.parent})"
            )
            raise self.fail(key, f"no file or folder at {absolute}{where}")
        if absolute.is_dir() and parse_dsn(str(absolute)).engine == "sqlite":
            raise self.fail(
                key,
                f"{absolute} is a folder without CSV, Parquet or JSON files: give a SQLite or DuckDB file, or a "
                "folder of data files",
            )
        return f"{engine}:///{absolute}" if "://" in dsn else str(absolute)

    def password_from_file(self, text: str, key: str) -> str:
        path = self.relative_path(text)
        try:
            content = path.read_text(encoding="utf-8")
        except OSError as error:
            raise self.fail(key, f"cannot read {path}: {error.strerror}") from None
        password = content.rstrip("\r\n")
        if not password:
            raise self.fail(key, f"{path} is empty")
        return password


def _shown(value: Any) -> str:
    """A wrong value, named by its type and shown when short (never a secret: those are strings, always valid)."""
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table"}.get(
        type(value), "a list" if isinstance(value, list) else type(value).__name__
    )
    shown = not isinstance(value, (str, dict, list)) or (isinstance(value, str) and len(value) <= 60)
    return f"{kind} ({value!r})" if shown else kind


def _option_kind(option: Option) -> str:
    if option.choices:
        return "one of " + ", ".join(option.choices)
    return {int: "an integer", float: "a number"}.get(option.parse, "a string")
