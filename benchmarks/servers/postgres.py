"""A throwaway PostgreSQL server for tests and benchmarks, started from Debian's server binaries."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.servers.ports import free_port


def _server_bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not candidates:
        on_path = shutil.which("initdb")
        if on_path is None:
            raise RuntimeError(
                "PostgreSQL server binaries not found: install them with `apt-get install -y postgresql` "
                "(scripts/test.sh does this)"
            )
        return Path(on_path).resolve().parent
    return Path(candidates[-1]).parent


class PostgresServer:
    """initdb + pg_ctl in a temporary directory, as the `postgres` user when running as root."""

    def __init__(self) -> None:
        self.bin_dir = _server_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="sqlscout-pg-"))
        self.data_dir = self.root / "data"
        self.port = free_port()
        self._user = "postgres" if os.geteuid() == 0 else None
        self._running = False

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{proc.stdout}\n{proc.stderr}")

    def start(self) -> str:
        """Start the server (creating its data directory the first time) and return its DSN."""
        if not self.data_dir.exists():
            self._init_data_dir()
        options = (
            f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-l", log, "-o", options, "start")
        self._running = True
        return self.dsn

    def _init_data_dir(self) -> None:
        if self._user:
            pw = pwd.getpwnam(self._user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        initdb = ["initdb", "-D", str(self.data_dir), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
        self._run(*initdb, "--no-locale", "--no-sync")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def shut_down(self, mode: str = "fast") -> None:
        """Stop the server but keep its data: start() brings it back on the same port.

        `mode` is pg_ctl's: "fast" ends the sessions cleanly, "immediate" as a crash would.
        """
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")
        self._running = False

    def stop(self) -> None:
        """Stop the server if it runs and delete its files."""
        try:
            if self._running:
                self.shut_down()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
