"""A throwaway MariaDB server for tests and benchmarks, started from Debian's mariadb-server binaries."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql

from benchmarks.servers.ports import free_port

_INSTALL_HINT = "install them with `apt-get install -y mariadb-server` (scripts/test.sh does this)"


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found is None:
        raise RuntimeError(f"MariaDB server binaries not found ({name}): {_INSTALL_HINT}")
    return found


class MariaDBServer:
    """mariadb-install-db + mariadbd in a temporary directory, listening on a loopback port; root has no password.

    As root the server runs as root (`--user=root`); otherwise as the calling user.
    """

    def __init__(self, start_timeout_s: float = 60.0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sqlscout-mariadb-"))
        self.data_dir = self.root / "data"
        self.socket = self.root / "sock"
        # Its own folder for temporary tables: servers of parallel test workers share no files in /tmp.
        self.tmp_dir = self.root / "tmp"
        self.port = free_port()
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen | None = None
        self._user = ["--user=root"] if os.geteuid() == 0 else []

    def start(self) -> str:
        """Create the data directory, start the server, wait until it answers; return the DSN of its root account
        (no database named)."""
        install = [
            _binary("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            *self._user,
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            f"--tmpdir={self.tmp_dir}",
        ]
        self.tmp_dir.mkdir()
        done = subprocess.run(install, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{done.stdout}\n{done.stderr}")
        command = [
            _binary("mariadbd"),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--socket={self.socket}",
            f"--tmpdir={self.tmp_dir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            *self._user,
            "--skip-log-bin",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=0",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            f"--pid-file={self.root / 'pid'}",
            f"--log-error={self.root / 'error.log'}",
        ]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_until_ready()
        # The root accounts mariadb-install-db makes are for localhost; TCP clients come from 127.0.0.1.
        with self._socket_connection() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        return self.dsn

    def _socket_connection(self) -> pymysql.Connection:
        return pymysql.connect(unix_socket=str(self.socket), user="root", connect_timeout=2, autocommit=True)

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with status {self._process.returncode}:\n{self._error_log()}"
                )
            try:
                self._socket_connection().close()
                return
            except pymysql.Error:
                time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not answer within {self.start_timeout_s:g} s:\n{self._error_log()}")

    def _error_log(self) -> str:
        log = self.root / "error.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else "(no error log)"

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s) and delete its files."""
        try:
            if self._process is not None and self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
