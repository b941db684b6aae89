"""A TCP proxy for fault tests: it counts the connections made through it and the bytes a server sends, and can
cut every connection, as a proxy's idle timeout or a network failover would."""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, one pair of threads per connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.bytes_from_server = 0
        self.connections = 0  # accepted so far
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self.connections += 1
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_server:
                    with self._lock:
                        self.bytes_from_server += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _shut(sock)

    def cut_connections(self) -> None:
        """Close every connection made so far, at both ends; new ones still get through."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)

    def close(self) -> None:
        self._listener.close()
        self.cut_connections()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
