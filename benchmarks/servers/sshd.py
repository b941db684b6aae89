"""A throwaway OpenSSH server on loopback for tests and benchmarks: its own host key, one client key, port
forwarding allowed, started from Debian's `openssh-server`."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.servers.ports import free_port

SSHD = Path("/usr/sbin/sshd")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(status.parent.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


class SshServer:
    """sshd in the foreground on 127.0.0.1; `client_key` logs in as the current user, `known_hosts` trusts it."""

    def __init__(self) -> None:
        if not SSHD.exists():
            raise RuntimeError(
                "OpenSSH server not found: install it with `apt-get install -y openssh-server` "
                "(scripts/test.sh does this)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="sqlscout-sshd-"))
        self.port = free_port()
        self.host_key = self.root / "host_key"
        self.client_key = self.root / "client_key"
        self.known_hosts = self.root / "known_hosts"
        self._process: subprocess.Popen | None = None
        self._log = None
        _keygen(self.host_key)
        _keygen(self.client_key)
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        host_public = (self.root / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_public[0]} {host_public[1]}\n")
        (self.root / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\nPidFile {self.root / 'sshd.pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\nStrictModes no\nUsePAM no\n"
        )

    @property
    def user(self) -> str:
        return pwd.getpwuid(os.geteuid()).pw_name

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start sshd (again, after stop_listening) and wait until it accepts connections."""
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
        self._log = open(self.root / "sshd.log", "ab")
        self._process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening within 10 s")

    def kill(self) -> None:
        """End sshd and every connection it holds, as a bastion's restart or a network cut would."""
        if self._process is None:
            return
        # Each connection's sshd starts a session of its own: found by parentage, killed before the listener.
        for pid in [*_descendants(self._process.pid), self._process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._process.wait()
        self._process = None
        self._log.close()

    def stop(self) -> None:
        """Kill sshd and delete its files."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
