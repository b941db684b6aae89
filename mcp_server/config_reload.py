"""Re-reading the configuration file while serving: on SIGHUP, and when its modification time changes."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from mcp_server.config_file import ConfigFileError, ServerConfig, load_config

log = logging.getLogger(__name__)

# How often the file's modification time is looked at.
CHECK_INTERVAL_S = 2.0


class ConfigWatcher:
    """Calls `apply` with each new configuration that reads cleanly; a broken file is logged and the old kept."""

    def __init__(self, path: Path, apply: Callable[[ServerConfig], None]) -> None:
        self.path = path
        self._apply = apply
        self._stamp = self._modified()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="config-watcher", daemon=True)

    def start(self, on_sighup: bool = True) -> None:
        """Watch in the background; `on_sighup` also reloads on SIGHUP (only the main thread may install it)."""
        if on_sighup and hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, lambda *_: self.reload_soon())
        self._thread.start()

    def reload_soon(self) -> None:
        """Re-read the file on the watcher's thread now, whatever its modification time."""
        self._stamp = None
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._thread.join(timeout=CHECK_INTERVAL_S * 2)

    def _modified(self) -> tuple[int, int] | None:
        try:
            status = self.path.stat()
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def _watch(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(CHECK_INTERVAL_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            stamp = self._modified()
            if stamp is None or stamp == self._stamp:
                continue
            self._stamp = stamp
            self.reload()

    def reload(self) -> bool:
        """Read the file and apply it; False (logged, the old configuration kept) if it does not read cleanly."""
        try:
            config = load_config(self.path)
        except ConfigFileError as error:
            log.error("configuration not reloaded, the previous one stays in use: %s", error)
            return False
        try:
            self._apply(config)
        except Exception:
            log.exception("configuration not reloaded, the previous one stays in use")
            return False
        log.info("configuration reloaded from %s", self.path)
        return True
