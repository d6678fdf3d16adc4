"""A minimal NATS client: what a toolfleet worker needs and nothing more.

It speaks the NATS text protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol)
over one TCP connection: INFO, CONNECT (user/password or token), PUB, SUB, MSG,
PING and PONG. No TLS, no JetStream, no headers. It reconnects on its own, with
a capped backoff, and re-subscribes; a publish while disconnected is dropped
(announcements are heartbeats: the next one replaces it).

Everything it reads is bounded: a control line over MAX_LINE bytes or a message
over the server's max_payload closes the connection.
"""

import json
import logging
import socket
import threading
import time
import urllib.parse

MAX_LINE = 64 * 1024  # a control line longer than this is a protocol error
CONNECT_TIMEOUT = 5.0  # seconds: TCP connect plus the INFO/CONNECT/PING/PONG exchange

log = logging.getLogger("natsclient")


class NATSError(Exception):
    """The server refused us (-ERR) or broke the protocol."""


class Client:
    """A NATS connection with its own reader thread.

    url: nats://[user:password@|token@]host:port (user, password and token may
    also be given as arguments; the arguments win).
    on_message(subject, payload) runs on the reader thread for every MSG of a
    subscription: keep it short.
    """

    def __init__(self, url, name="toolfleet-python-worker", user=None, password=None, token=None,
                 on_message=None, on_connect=None):
        u = urllib.parse.urlsplit(url if "://" in url else "nats://" + url)
        if u.scheme not in ("nats", "tcp"):
            raise ValueError("unsupported NATS URL scheme %r (this client speaks plain nats://)" % u.scheme)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 4222
        if u.username and u.password is None:
            token = token or urllib.parse.unquote(u.username)
        elif u.username:
            user = user or urllib.parse.unquote(u.username)
            password = password or urllib.parse.unquote(u.password)
        self.name, self.user, self.password, self.token = name, user, password, token
        self.on_message = on_message
        self.on_connect = on_connect  # runs after every (re)connect, on the reader thread
        self._subs = {}  # sid -> subject
        self._next_sid = 1
        self._sock = None
        self._wlock = threading.Lock()  # one writer at a time on the socket
        self._closed = threading.Event()
        self._connected = threading.Event()
        self._max_payload = 1024 * 1024
        self._pong = None  # set by flush, until the server's PONG
        self._thread = None

    # -- public API --------------------------------------------------------

    def start(self):
        """Connects in the background, forever (until close), reconnecting on loss."""
        self._thread = threading.Thread(target=self._run, name="nats-reader", daemon=True)
        self._thread.start()

    def wait_connected(self, timeout):
        return self._connected.wait(timeout)

    def subscribe(self, subject):
        sid = str(self._next_sid)
        self._next_sid += 1
        self._subs[sid] = subject
        if self._connected.is_set():
            self._send(("SUB %s %s\r\n" % (subject, sid)).encode())
        return sid

    def publish(self, subject, payload):
        """Sends payload (bytes) on subject; returns False when not connected."""
        if len(payload) > self._max_payload:
            raise ValueError("payload of %d bytes over the server's max_payload %d" % (len(payload), self._max_payload))
        if not self._connected.is_set():
            return False
        return self._send(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))

    def flush(self, timeout=2.0):
        """Waits (up to timeout) until the server has processed what we sent: a
        PING answered by PONG proves it. Returns False on timeout."""
        if not self._connected.is_set():
            return False
        self._pong = threading.Event()
        if not self._send(b"PING\r\n"):
            return False
        return self._pong.wait(timeout)

    def close(self):
        self._closed.set()
        self._connected.clear()
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(CONNECT_TIMEOUT)

    # -- internals ---------------------------------------------------------

    def _send(self, data):
        s = self._sock
        if s is None:
            return False
        try:
            with self._wlock:
                s.sendall(data)
            return True
        except OSError as e:
            log.debug("NATS write failed: %s", e)
            return False

    def _run(self):
        backoff = 0.1
        while not self._closed.is_set():
            try:
                self._session()
                backoff = 0.1
            except (OSError, NATSError, ValueError) as e:
                if self._closed.is_set():
                    return
                log.warning("NATS connection lost or refused (%s); retrying in %.1fs", e, backoff)
            self._connected.clear()
            if self._closed.wait(backoff):
                return
            backoff = min(backoff * 2, 2.0)

    def _session(self):
        s = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT)
        self._sock = s
        r = _Reader(s)
        try:
            op, _, rest = r.line().partition(" ")
            if op != "INFO":
                raise NATSError("expected INFO, got %r" % op[:80])
            info = json.loads(rest)
            self._max_payload = int(info.get("max_payload", self._max_payload))
            if info.get("tls_required"):
                raise NATSError("the server requires TLS, which this minimal client does not speak")
            opts = {"verbose": False, "pedantic": False, "lang": "python", "version": "0.1.0",
                    "protocol": 1, "headers": False, "name": self.name}
            if self.token:
                opts["auth_token"] = self.token
            elif self.user:
                opts["user"], opts["pass"] = self.user, self.password or ""
            self._send(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")
            # The server answers PONG when CONNECT was accepted, -ERR when not.
            while True:
                line = r.line()
                if line == "PONG":
                    break
                if line.startswith("-ERR"):
                    raise NATSError(line)
                if line == "PING":
                    self._send(b"PONG\r\n")
            s.settimeout(None)  # from now on the server's PINGs keep the socket alive
            for sid, subject in self._subs.items():
                self._send(("SUB %s %s\r\n" % (subject, sid)).encode())
            self._connected.set()
            log.info("NATS connected to %s:%d", self.host, self.port)
            if self.on_connect:
                self.on_connect()
            self._loop(r)
        finally:
            self._connected.clear()
            self._sock = None
            s.close()

    def _loop(self, r):
        while not self._closed.is_set():
            line = r.line()
            if line.startswith("MSG "):
                # MSG <subject> <sid> [reply-to] <#bytes>
                parts = line.split(" ")
                if len(parts) not in (4, 5):
                    raise NATSError("malformed MSG line")
                size = int(parts[-1])
                if size < 0 or size > self._max_payload:
                    raise NATSError("MSG of %d bytes over max_payload" % size)
                payload = r.exact(size + 2)[:-2]
                if self.on_message and parts[2] in self._subs:
                    try:
                        self.on_message(parts[1], payload)
                    except Exception:  # a handler's bug must not kill the connection
                        log.exception("NATS message handler failed")
            elif line == "PING":
                self._send(b"PONG\r\n")
            elif line == "PONG":
                pong = self._pong
                if pong is not None:
                    pong.set()
            elif line.startswith("-ERR"):
                # Authorization or permission errors: the server may close next.
                log.warning("NATS server error: %s", line)
            elif line.startswith("INFO ") or line == "+OK":
                pass  # cluster updates; verbose is off
            else:
                raise NATSError("unexpected protocol line %r" % line[:80])


class _Reader:
    """Reads CRLF-terminated lines and exact byte counts from a socket, bounded."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("connection closed by the server")
        self.buf += chunk

    def line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + 2:]
                return out.decode("utf-8", "replace")
            if len(self.buf) > MAX_LINE:
                raise NATSError("control line over %d bytes" % MAX_LINE)
            self._fill()

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out
