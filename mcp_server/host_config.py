"""Configuration snippets that make Claude Desktop, VS Code or Claude Code start this server."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from mcp_server.settings import OPTIONS, Settings
from mcp_server.shell_quoting import SHELL_NAMES, SHELLS, default_shell, join_command

HOSTS = ("claude-desktop", "vscode", "claude-code")
HTTP_ONLY_FIELDS = ("transport", "host", "port", "token", "allowed_origins")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
HOST_NAMES = {"claude-desktop": "Claude Desktop", "vscode": "VS Code", "claude-code": "Claude Code"}
CLAUDE_DESKTOP_CONFIG = {
    "macOS": "~/Library/Application Support/Claude/claude_desktop_config.json",
    "Windows": r"%APPDATA%\Claude\claude_desktop_config.json",
    "Linux": "~/.config/Claude/claude_desktop_config.json",
}
# The user profile's mcp.json, for the default profile ("MCP: Open User Configuration" finds any profile's).
VSCODE_USER_CONFIG = {
    "macOS": "~/Library/Application Support/Code/User/mcp.json",
    "Windows": r"%APPDATA%\Code\User\mcp.json",
    "Linux": "~/.config/Code/User/mcp.json",
}


def absolute_dsn(dsn: str) -> str:
    """The DSN with a relative SQLite or DuckDB path made absolute: hosts start servers from another directory."""
    for prefix in ("sqlite:///", "duckdb:///"):
        if dsn.startswith(prefix):
            return prefix + str(Path(dsn[len(prefix) :]).resolve())
    if "://" not in dsn and "=" not in dsn:
        return str(Path(dsn).resolve())
    return dsn


def dsn_has_password(dsn: str) -> bool:
    if "://" in dsn:
        return urlsplit(dsn).password is not None
    return "password=" in dsn


def stdio_launch(settings: Settings) -> tuple[str, list[str], dict[str, str]]:
    """Command, arguments and environment that start this server over stdio with these settings.

    Secrets (token, API key, a DSN with a password) go into the environment, not the visible arguments.
    """
    values = settings.non_defaults()
    if settings.dsn:
        values["dsn"] = absolute_dsn(settings.dsn)
    if settings.model:
        values["model"] = str(Path(settings.model).resolve())
    if settings.config:
        values["config"] = str(Path(settings.config).resolve())
    args = ["-m", "mcp_server"]
    env: dict[str, str] = {}
    for option in OPTIONS:
        if option.field not in values or option.field in HTTP_ONLY_FIELDS:
            continue
        value = str(values[option.field])
        if option.switch:
            args.append(option.flag)  # a switch differs from its default (off) only when on
        elif option.secret or (option.field == "dsn" and dsn_has_password(value)):
            env[option.env] = value
        else:
            args += [option.flag, value]
    if not _installed():
        # Run from a source checkout: the host starts the server in some other directory.
        env["PYTHONPATH"] = str(PROJECT_ROOT)
    return sys.executable, args, env


def _installed() -> bool:
    try:
        importlib.metadata.distribution("sqlscout")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def http_url(settings: Settings) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.port}/mcp"


def http_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.token}"} if settings.token else {}


def claude_desktop(settings: Settings, name: str) -> str:
    """`claude_desktop_config.json`'s `mcpServers` entry (Claude Desktop launches local servers over stdio)."""
    command, args, env = stdio_launch(settings)
    entry: dict = {"command": command, "args": args}
    if env:
        entry["env"] = env
    return json.dumps({"mcpServers": {name: entry}}, indent=2)


def vscode(settings: Settings, name: str) -> str:
    """`.vscode/mcp.json`: a stdio server VS Code starts, or the URL of a running HTTP server."""
    if settings.transport == "http":
        entry: dict = {"type": "http", "url": http_url(settings)}
        if settings.token:
            entry["headers"] = http_headers(settings)
    else:
        command, args, env = stdio_launch(settings)
        entry = {"type": "stdio", "command": command, "args": args}
        if env:
            entry["env"] = env
    return json.dumps({"servers": {name: entry}}, indent=2)


def claude_code(settings: Settings, name: str, shell: str) -> str:
    """A `claude mcp add` command line, quoted for `shell`."""
    if settings.transport == "http":
        words = ["claude", "mcp", "add", "--transport", "http", name, http_url(settings)]
        for key, value in http_headers(settings).items():
            words += ["--header", f"{key}: {value}"]
        return join_command(words, shell)
    command, args, env = stdio_launch(settings)
    words = ["claude", "mcp", "add", name]
    for key, value in env.items():
        words += ["--env", f"{key}={value}"]
    return join_command([*words, "--", command, *args], shell)


def host_snippet(host: str, settings: Settings, name: str = "sqlscout", shell: str | None = None) -> str:
    """The snippet for one of HOSTS; `shell` (default: this platform's) quotes Claude Code's command."""
    if host == "claude-code":
        return claude_code(settings, name, shell or default_shell())
    render = {"claude-desktop": claude_desktop, "vscode": vscode}[host]
    return render(settings, name)


def host_instructions(host: str, settings: Settings, shell: str | None = None) -> str:
    """Where the snippet for `host` goes on each platform, and on which machine to make it (for stderr)."""
    if host == "claude-desktop":
        where = [
            'Merge "mcpServers" into Claude Desktop\'s claude_desktop_config.json '
            "(Settings > Developer > Edit Config opens it), then restart Claude Desktop:",
            *_per_platform(CLAUDE_DESKTOP_CONFIG),
        ]
    elif host == "vscode":
        where = [
            'Merge "servers" into .vscode/mcp.json in the workspace, or into your user profile\'s mcp.json '
            '(command "MCP: Open User Configuration"), for the default profile:',
            *_per_platform(VSCODE_USER_CONFIG),
        ]
    else:
        where = [
            f"Run this in {SHELL_NAMES[shell or default_shell()]}; --shell {'|'.join(SHELLS)} quotes it for another.",
            "It adds the server to the current project, for you only: add --scope user after `claude mcp add` "
            "for all your projects, or --scope project to share it through the project's .mcp.json.",
        ]
    return "\n".join([*where, _which_machine(host, settings)])


def _per_platform(paths: dict[str, str]) -> list[str]:
    return [f"  {platform + ':':9}{path}" for platform, path in paths.items()]


def _which_machine(host: str, settings: Settings) -> str:
    if settings.transport == "http" and host != "claude-desktop":
        return (
            f"{HOST_NAMES[host]} connects to {http_url(settings)} from the machine it runs on: start the server "
            "that address reaches with these options (python -m mcp_server --transport http ...)."
        )
    return (
        f"The Python interpreter ({sys.executable}) and the paths in it are this machine's: run this config "
        f"command on the machine {HOST_NAMES[host]} runs on, with the Python that has sqlscout there."
    )
