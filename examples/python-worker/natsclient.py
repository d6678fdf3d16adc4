"""A minimal NATS client: what a toolfleet worker needs and nothing more.

It speaks the NATS text protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol)
over one TCP connection: INFO, CONNECT (user/password or token), PUB, HPUB, SUB,
MSG, HMSG, PING and PONG, and request/reply on one _INBOX subscription (with
no_responders: a request nobody listens to fails at once). No TLS and no
JetStream API beyond what a request with headers gives: a JetStream publish
(the call journal's compare-and-set writes) is a request whose answer is the
JSON acknowledgement. It reconnects on its own, with a capped backoff, and
re-subscribes; a publish while disconnected is dropped (announcements are
heartbeats: the next one replaces it), a request fails.

Everything it reads is bounded: a control line over MAX_LINE bytes or a message
over the server's max_payload closes the connection.
"""

import json
import logging
import os
import socket
import threading
import time
import urllib.parse

MAX_LINE = 64 * 1024  # a control line longer than this is a protocol error
CONNECT_TIMEOUT = 5.0  # seconds: TCP connect plus the INFO/CONNECT/PING/PONG exchange

log = logging.getLogger("natsclient")


class NATSError(Exception):
    """The server refused us (-ERR) or broke the protocol; or a request failed."""


class NotConnected(NATSError):
    """A request while the connection is down."""


class NoResponders(NATSError):
    """A request on a subject nobody subscribes to (status 503): for a JetStream
    publish, no stream holds the subject (the bucket does not exist)."""


class PermissionDenied(NATSError):
    """The server refused a request's publish, or the inbox's subscription, for
    want of permission."""


class Timeout(NATSError):
    """A request without an answer in time: what it asked may or may not have happened."""


class Msg:
    """A message of a subscription, or the answer to a request."""

    def __init__(self, subject, reply, data, headers=None, status="", description=""):
        self.subject, self.reply, self.data = subject, reply, data
        self.headers = headers or {}  # name -> first value
        self.status, self.description = status, description  # "503", "No Responders"; "" for a plain message


def _header_block(headers):
    """NATS/1.0 and one "Name: value" line per header, CRLF-terminated, then a blank line."""
    lines = [b"NATS/1.0\r\n"]
    for k, v in headers.items():
        k, v = str(k), str(v)
        if not k or any(c in k for c in ":\r\n ") or any(c in v for c in "\r\n"):
            raise ValueError("header %r: %r cannot be sent" % (k, v))
        lines.append(("%s: %s\r\n" % (k, v)).encode())
    lines.append(b"\r\n")
    return b"".join(lines)


def _parse_headers(block):
    """Reads an HMSG header block: (headers, status, description)."""
    lines = block.decode("utf-8", "replace").split("\r\n")
    first = lines[0].split(" ", 2) if lines else []
    if not first or not first[0].startswith("NATS/"):
        raise NATSError("malformed header block")
    status = first[1] if len(first) > 1 else ""
    description = first[2] if len(first) > 2 else ""
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if sep:
            headers.setdefault(k.strip(), v.strip())
    return headers, status, description


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
        self._subs = {}  # sid -> (subject, callback(Msg) or None: on_message)
        self._next_sid = 1
        self._slock = threading.Lock()  # sids, the inbox and the pending requests
        self._inbox = None  # "_INBOX.<random>": requests' replies arrive on <inbox>.<token>
        self._pending = {}  # token -> [threading.Event, Msg or None, subject, NATSError or None]
        self._next_token = 1
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

    def subscribe(self, subject, callback=None):
        """Subscribes subject; its messages go to callback(Msg), or to
        on_message(subject, payload) without one."""
        with self._slock:
            sid = str(self._next_sid)
            self._next_sid += 1
            self._subs[sid] = (subject, callback)
        if self._connected.is_set():
            self._send(("SUB %s %s\r\n" % (subject, sid)).encode())
        return sid

    def publish(self, subject, payload, headers=None, reply=""):
        """Sends payload (bytes) on subject, with headers (a dict) if any; returns
        False when not connected."""
        if not self._connected.is_set():
            return False
        return self._send(self._frame(subject, payload, headers, reply))

    def _frame(self, subject, payload, headers, reply):
        if not subject or any(c in subject for c in " \t\r\n") or any(c in reply for c in " \t\r\n"):
            raise ValueError("subject %r cannot be published on" % subject)
        hdr = _header_block(headers) if headers else b""
        if len(hdr) + len(payload) > self._max_payload:
            raise ValueError("message of %d bytes over the server's max_payload %d" %
                             (len(hdr) + len(payload), self._max_payload))
        to = subject.encode() + (b" " + reply.encode() if reply else b"")
        if hdr:
            return b"HPUB %s %d %d\r\n%s%s\r\n" % (to, len(hdr), len(hdr) + len(payload), hdr, payload)
        return b"PUB %s %d\r\n%s\r\n" % (to, len(payload), payload)

    def request(self, subject, payload, headers=None, timeout=2.0):
        """Publishes payload (with headers) on subject with a reply subject of
        this connection's inbox and returns the first answer, a Msg. Raises
        NotConnected, NoResponders (nobody listens on subject), Timeout (no
        answer within timeout seconds: it may or may not have been done), or
        ValueError (a message this client cannot send)."""
        if not self._connected.is_set():
            raise NotConnected("NATS not connected")
        slot = [threading.Event(), None, subject, None]
        with self._slock:
            if self._inbox is None:
                # Sent under the lock: no request of another thread goes out before it.
                # (Lost with the connection, it is sent again on reconnect, from _subs.)
                self._inbox = "_INBOX." + os.urandom(11).hex()
                sid = str(self._next_sid)
                self._next_sid += 1
                self._subs[sid] = (self._inbox + ".*", self._on_reply)
                self._send(("SUB %s.* %s\r\n" % (self._inbox, sid)).encode())
            token = str(self._next_token)
            self._next_token += 1
            self._pending[token] = slot
        try:
            frame = self._frame(subject, payload, headers, "%s.%s" % (self._inbox, token))
            if not self._send(frame):
                raise NotConnected("NATS write failed")
            if not slot[0].wait(timeout):
                raise Timeout("no answer on %s within %.1fs" % (subject, timeout))
            if slot[3] is not None:
                raise slot[3]
            msg = slot[1]
            if msg.status == "503":
                raise NoResponders("no responders on %s" % subject)
            return msg
        finally:
            with self._slock:
                self._pending.pop(token, None)

    def _on_reply(self, msg):
        token = msg.subject.rsplit(".", 1)[-1]
        with self._slock:
            slot = self._pending.get(token)
        if slot is not None and not slot[0].is_set():
            slot[1] = msg
            slot[0].set()

    def _refused(self, line):
        """An -ERR about permissions fails the requests it dooms at once, rather
        than after their timeout: those publishing on the refused subject, or all
        of them when the inbox cannot be subscribed."""
        what, _, subject = line.partition(" to ")
        subject = subject.strip("'\" ")
        if "Permissions Violation for Publish" in what:
            doomed = lambda slot: slot[2] == subject  # noqa: E731
        elif "Permissions Violation for Subscription" in what and self._inbox and subject.startswith(self._inbox):
            doomed = lambda slot: True  # noqa: E731
        else:
            return
        with self._slock:
            slots = [slot for slot in self._pending.values() if doomed(slot)]
        for slot in slots:
            if not slot[0].is_set():
                slot[3] = PermissionDenied(line[5:].strip("' "))
                slot[0].set()

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
            if not info.get("headers"):
                raise NATSError("the server does not support headers (NATS 2.2 or later is needed)")
            if info.get("tls_required"):
                raise NATSError("the server requires TLS, which this minimal client does not speak")
            opts = {"verbose": False, "pedantic": False, "lang": "python", "version": "0.1.0",
                    "protocol": 1, "headers": True, "no_responders": True, "name": self.name}
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
            with self._slock:
                subs = [(sid, subject) for sid, (subject, _) in self._subs.items()]
            for sid, subject in subs:
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
            if line.startswith("MSG ") or line.startswith("HMSG "):
                self._dispatch(line, r)
            elif line == "PING":
                self._send(b"PONG\r\n")
            elif line == "PONG":
                pong = self._pong
                if pong is not None:
                    pong.set()
            elif line.startswith("-ERR"):
                # Authorization or permission errors: the server may close next.
                log.warning("NATS server error: %s", line)
                self._refused(line)
            elif line.startswith("INFO ") or line == "+OK":
                pass  # cluster updates; verbose is off
            else:
                raise NATSError("unexpected protocol line %r" % line[:80])


    def _dispatch(self, line, r):
        # MSG <subject> <sid> [reply-to] <#bytes>
        # HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>
        parts = line.split(" ")
        hmsg = parts[0] == "HMSG"
        if len(parts) - hmsg not in (4, 5):
            raise NATSError("malformed %s line" % parts[0])
        size = int(parts[-1])
        hsize = int(parts[-2]) if hmsg else 0
        if size < 0 or size > self._max_payload + MAX_LINE or not 0 <= hsize <= size:
            raise NATSError("%s of %d bytes over max_payload" % (parts[0], size))
        data = r.exact(size + 2)[:-2]
        reply = parts[3] if len(parts) - hmsg == 5 else ""
        with self._slock:
            sub = self._subs.get(parts[2])
        if sub is None:
            return
        try:
            if sub[1] is not None:
                headers, status, description = _parse_headers(data[:hsize]) if hmsg else ({}, "", "")
                sub[1](Msg(parts[1], reply, data[hsize:], headers, status, description))
            elif self.on_message:
                self.on_message(parts[1], data[hsize:])
        except Exception:  # a handler's bug must not kill the connection
            log.exception("NATS message handler failed")


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
