"""A toolfleet worker in Python: gRPC, reflection, health, the NATS announcement
and a polite leave, as docs/tool-authoring.md ("The announcement protocol (any
language)") describes. Only grpcio and protobuf are needed (Debian:
python3-grpcio, python3-protobuf): Debian ships neither grpcio-reflection nor
grpcio-health-checking, so both services are implemented here, on the
reflection and health protos of the descriptor set.

The contract comes as a FileDescriptorSet (descriptors.binpb) compiled from the
same proto/ files as the Go workers; message classes are built from it at run
time, so there is no generated Python code to keep in step.

A toolkit is a plain object with one method per RPC, named as in the contract:
method(request, call) -> response, where call is a [Call] (call id, deadline,
trace parent) and an execution error is `raise ToolError(...)`.

The worker keeps the call journal (sdk/tool/journal, docs/gateway.md "Exactly
once") and says so in its announcement (callJournal): a call that comes with a
toolfleet-claim is recorded as started (S) before the tool runs, kept alive
while it runs, and recorded as finished (F, with its answer) after; a claim
that has moved on, or a journal that cannot be written, refuses the call
without running it. See [Journal].
"""

import binascii
import datetime
import json
import logging
import os
import signal
import socket
import threading
import time
import urllib.parse
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import natsclient

log = logging.getLogger("toolfleet")

# The NATS subjects and health values of the announcement protocol.
ANNOUNCE_SUBJECT = "toolfleet.registry.announce"
DISCOVER_SUBJECT = "toolfleet.registry.discover"
SERVING, DRAINING, NOT_SERVING = "SERVING", "DRAINING", "NOT_SERVING"

# Metadata the gateway sends with a call, and the trailer of a drain refusal.
CALL_ID_KEY = "toolfleet-call-id"
PRINCIPAL_KEY = "toolfleet-principal"  # who the call is for ("anonymous" with auth off), percent-encoded
PRINCIPAL_VIA_KEY = "toolfleet-principal-via"  # the delegate, on a delegated call
# + provider: the caller's access token, for a tool whose contract names a credential
# (ToolOptions.credential; docs/credentials.md). A secret: never log or return it.
CREDENTIAL_KEY_PREFIX = "toolfleet-credential-"
TRACEPARENT_KEY = "traceparent"
ACCEPT_RESULT_BYTES_KEY = "toolfleet-accept-result-bytes"
DRAINING_TRAILER = "toolfleet-draining"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
LOG_TRAILER = "toolfleet-log-bin"  # the lines a call logged for its caller: a toolfleet.v1.ToolLogs
MAX_CALLER_LOG_LINES = 100  # the same bounds as sdk/tool (the gateway enforces them again)
MAX_CALLER_LOG_BYTES = 64 * 1024
CALLER_LOG_LEVELS = {"debug": 1, "info": 2, "notice": 3, "warning": 4, "error": 5}  # toolfleet.v1.ToolLogLevel

# The call journal (sdk/tool/journal): the claim's metadata and the trailers, as in Go.
CLAIM_KEY = "toolfleet-claim"  # "<subject> <revision> <digest hex>"
NOT_STARTED_TRAILER = "toolfleet-not-started"  # the call was refused without running
CLAIM_LOST, JOURNAL_UNAVAILABLE = "claim-lost", "journal-unavailable"
FINISHED_TRAILER = "toolfleet-journal-rev"  # the revision of the finished record
JOURNAL_HEARTBEAT = 2.0  # seconds: the started record is rewritten this often while the tool runs
JOURNAL_WRITE_TIMEOUT = 2.0  # seconds to wait for JetStream's acknowledgement of one write
JOURNAL_MAX_VALUE = 1024 * 1024 - 1024  # a finished record over this is written as too large (T)
WRONG_LAST_SEQUENCE = 10071  # JetStream: the subject is not at the expected sequence
MESSAGE_OVER_MAXIMUM = 10054  # JetStream: the message is over the stream's largest
CLAIM_LOST_MESSAGE = "this call was taken over by a retry or withdrawn by its gateway; it did not run here"
JOURNAL_UNAVAILABLE_MESSAGE = "the call journal could not record this call's start; it did not run here"

DEFAULT_TIMEOUT = 30.0  # seconds, when neither the caller nor the contract sets one
MAX_DEADLINE = 24 * 3600.0  # a caller's deadline further out than this counts as none
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # grpc's default; stated, not implied
PROBE_GAP = 0.1  # seconds: the least time between two answers to discovery probes
DRAIN_LINGER = 1.0  # seconds a draining worker keeps refusing before it closes its port


class ToolError(Exception):
    """An execution error: the tool ran and failed; the model sees message."""

    def __init__(self, message, developer_message="", can_retry=False, retry_after_ms=0, prompt_hint=""):
        super().__init__(message)
        self.message = message
        self.developer_message = developer_message
        self.can_retry = can_retry
        self.retry_after_ms = retry_after_ms
        self.prompt_hint = prompt_hint


class Call:
    """What the gateway sent with one call."""

    def __init__(self, method, call_id, traceparent, deadline, accept_result_bytes, principal="", via="", credentials=None):
        self.method = method
        self._credentials = credentials or {}  # provider -> token; see credential
        self.call_id = call_id  # the caller's idempotency key; may arrive again on a retry
        # Who the call is for, and the delegate that made it ("" if direct). Trust them
        # only when nothing but the gateway can reach the worker (NetworkPolicy, mTLS).
        self.principal = principal
        self.via = via
        self.traceparent = traceparent
        self.deadline = deadline  # time.monotonic() value
        self.accept_result_bytes = accept_result_bytes
        self.logs = []  # (level, message, unix ns) for the caller; see log
        self.log_bytes = 0
        self.logs_dropped = 0

    def credential(self, provider):
        """The caller's access token at provider (e.g. "github") that the gateway
        gave this call, as tool.Credential in Go: only for the provider the tool's
        contract names, only for this call. Send it as "Authorization: Bearer …";
        never log, return or keep it. Raises KeyError when the call carries none."""
        if provider not in self._credentials:
            raise KeyError("the call carries no credential for %r (does the contract name it?)" % provider)
        return self._credentials[provider]

    def remaining(self):
        """Seconds left before the call's deadline (negative once past)."""
        return self.deadline - time.monotonic()

    def log(self, level, message):
        """Logs a line for the caller (level: debug, info, notice, warning or
        error); it reaches the caller with the result (CallToolResponse.logs,
        MCP notifications/message). Never secrets: a model may read it."""
        log.log(logging.WARNING if level in ("warning", "error") else logging.INFO,
                "to caller call_id=%s: %s", self.call_id or "-", message)
        size = len(message.encode("utf-8"))
        if len(self.logs) >= MAX_CALLER_LOG_LINES or self.log_bytes + size > MAX_CALLER_LOG_BYTES:
            self.logs_dropped += 1
            return
        self.log_bytes += size
        self.logs.append((CALLER_LOG_LEVELS.get(level, 2), message, time.time_ns()))


class Claim:
    """A call's claim (toolfleet-claim): the journal entry's subject
    ($KV.<bucket>.<key>), the revision the gateway's lock is at, and the digest
    (32 bytes) of the call's input."""

    def __init__(self, subject, revision, digest):
        self.subject, self.revision, self.digest = subject, revision, digest

    @classmethod
    def parse(cls, value):
        """Reads a toolfleet-claim value, as journal.ParseClaim does; ValueError if malformed."""
        parts = value.split(" ")
        if (len(parts) != 3 or not parts[0].startswith("$KV.")
                or any(c in parts[0] for c in "*> \t\r\n")):
            raise ValueError("malformed claim %r" % value[:200])
        if not parts[1].isdigit() or int(parts[1]) == 0 or int(parts[1]) >= 1 << 64:
            raise ValueError("malformed claim revision %r" % parts[1][:40])
        try:
            digest = binascii.unhexlify(parts[2])
        except (binascii.Error, ValueError):
            digest = b""
        if len(digest) != 32:
            raise ValueError("malformed claim digest %r" % parts[2][:80])
        return cls(parts[0], int(parts[1]), digest)


class JournalMoved(Exception):
    """The entry is no longer at the expected revision (JetStream error 10071)."""


class JournalError(Exception):
    """A write that may not have happened: no answer, no bucket, another refusal."""

    def __init__(self, message, err_code=0):
        super().__init__(message)
        self.err_code = err_code


class Journal:
    """The worker's side of the call journal, on the worker's NATS connection.

    Every write is a JetStream publish to the entry's subject expecting its
    current revision (Nats-Expected-Last-Subject-Sequence): a compare-and-set,
    so that a request whose gateway was replaced, or that its gateway gave up
    on, finds the entry moved and does not run.
    """

    def __init__(self, nc, worker_id):
        self.nc, self.worker_id = nc, worker_id

    def write(self, subject, value, expect, timeout=JOURNAL_WRITE_TIMEOUT):
        """Writes value if the entry is at revision expect; returns the new revision.
        Raises JournalMoved or JournalError."""
        try:
            reply = self.nc.request(subject, value, {"Nats-Expected-Last-Subject-Sequence": str(expect)}, timeout)
        except natsclient.NATSError as e:
            raise JournalError("journal write to %s: %s" % (subject, e))
        except ValueError as e:  # over max_payload
            raise JournalError("journal write to %s: %s" % (subject, e), MESSAGE_OVER_MAXIMUM)
        try:
            ack = json.loads(reply.data)
        except ValueError:
            raise JournalError("unreadable acknowledgement %r" % reply.data[:200])
        err = ack.get("error") if isinstance(ack, dict) else None
        if isinstance(err, dict):
            if err.get("err_code") == WRONG_LAST_SEQUENCE:
                raise JournalMoved(err.get("description", "wrong last sequence"))
            raise JournalError("JetStream refused the write: %s (%s)" % (err.get("description"), err.get("err_code")),
                               err.get("err_code") or 0)
        seq = ack.get("seq") if isinstance(ack, dict) else None
        if not isinstance(seq, int) or seq <= 0:
            raise JournalError("acknowledgement without a sequence: %r" % reply.data[:200])
        return seq

    def start(self, claim, timeout=JOURNAL_WRITE_TIMEOUT):
        """Records the call as started (S); returns a [Started] that keeps it alive.
        Raises JournalMoved (the claim is lost) or JournalError."""
        rev = self.write(claim.subject, b"S" + claim.digest + self.worker_id.encode(), claim.revision, timeout)
        return Started(self, claim, rev)


class Started:
    """A call recorded as started: a heartbeat thread rewrites the S record
    every JOURNAL_HEARTBEAT seconds while the tool runs; finish stops it and
    writes the F record."""

    def __init__(self, journal, claim, revision):
        self.journal, self.claim, self.revision = journal, claim, revision
        self.lock = threading.Lock()  # one write at a time; revision follows them
        self.stopped = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._beat, name="journal-heartbeat", daemon=True)
        self.thread.start()

    def _beat(self):
        value = b"S" + self.claim.digest + self.journal.worker_id.encode()
        while not self.stopped.wait(JOURNAL_HEARTBEAT):
            with self.lock:
                if self.stopped.is_set():
                    return
                try:
                    self.revision = self.journal.write(self.claim.subject, value, self.revision)
                except JournalMoved as e:
                    self.lost = True
                    log.warning("journal: %s moved while the tool ran (%s); heartbeat stopped", self.claim.subject, e)
                    return
                except JournalError as e:
                    log.warning("journal: heartbeat on %s failed: %s", self.claim.subject, e)

    def finish(self, outcome):
        """Stops the heartbeat and records the call as finished: F with the
        serialized WorkerCallOutcome, or T when that is too large to keep.
        Returns the record's revision, or None (logged) when it was not written."""
        self.stopped.set()
        with self.lock:
            if self.lost:
                log.warning("journal: %s moved while the tool ran; its outcome is not recorded", self.claim.subject)
                return None
            value = b"F" + self.claim.digest + outcome
            if len(value) > JOURNAL_MAX_VALUE:
                value = b"T" + self.claim.digest
            try:
                try:
                    self.revision = self.journal.write(self.claim.subject, value, self.revision)
                except JournalError as e:
                    if e.err_code != MESSAGE_OVER_MAXIMUM or value[:1] != b"F":
                        raise
                    self.revision = self.journal.write(self.claim.subject, b"T" + self.claim.digest, self.revision)
            except (JournalMoved, JournalError) as e:
                log.warning("journal: finishing %s failed: %s", self.claim.subject, e)
                return None
            return self.revision


class Contract:
    """The toolkit contracts and their imports, from a FileDescriptorSet."""

    def __init__(self, path):
        with open(path, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        self.pool = descriptor_pool.DescriptorPool()
        self.files = {}  # name -> FileDescriptorProto
        for fd in fds.file:  # imports come first in the set
            self.pool.Add(fd)
            self.files[fd.name] = fd
        self.classes = message_factory.MessageFactory(self.pool).GetMessages(list(self.files))
        self._service_opts = self.classes["google.protobuf.ServiceOptions"]
        self._method_opts = self.classes["google.protobuf.MethodOptions"]

    def message(self, full_name):
        return self.classes[full_name]

    def service(self, full_name):
        return self.pool.FindServiceByName(full_name)

    def _proto_of(self, sd):
        fdp = self.files[sd.file.name]
        return next(s for s in fdp.service if s.name == sd.name)

    def toolkit(self, service_name):
        """The (toolfleet.v1.toolkit) option of a service: name and version."""
        sd = self.service(service_name)
        opts = self._service_opts.FromString(self._proto_of(sd).options.SerializeToString())
        tk = opts.Extensions[self.pool.FindExtensionByName("toolfleet.v1.toolkit")]
        return {"name": tk.name or sd.name, "version": tk.version or "0.0.0", "service": sd.full_name}

    def timeout(self, service_name, method):
        """The (toolfleet.v1.tool).timeout of a method in seconds, or None."""
        sp = self._proto_of(self.service(service_name))
        mp = next(m for m in sp.method if m.name == method)
        opts = self._method_opts.FromString(mp.options.SerializeToString())
        t = opts.Extensions[self.pool.FindExtensionByName("toolfleet.v1.tool")]
        if not t.HasField("timeout"):
            return None
        return t.timeout.seconds + t.timeout.nanos / 1e9

    def file_with_imports(self, name):
        """The serialized file and, before it, every file it imports."""
        out, seen = [], set()

        def walk(n):
            if n in seen or n not in self.files:
                return
            seen.add(n)
            for dep in self.files[n].dependency:
                walk(dep)
            out.append(self.files[n].SerializeToString())

        walk(name)
        return out


class Health:
    """grpc.health.v1.Health: SERVING while the worker serves, NOT_SERVING once it drains."""

    def __init__(self, contract, services):
        self.Req = contract.message("grpc.health.v1.HealthCheckRequest")
        self.Resp = contract.message("grpc.health.v1.HealthCheckResponse")
        self.services = set(services) | {""}
        self.serving = True
        self.cond = threading.Condition()

    def set_serving(self, serving):
        with self.cond:
            self.serving = serving
            self.cond.notify_all()

    def _status(self):
        return 1 if self.serving else 2  # SERVING, NOT_SERVING

    def check(self, req, context):
        if req.service not in self.services:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return self.Resp(status=self._status())

    def watch(self, req, context):
        if req.service not in self.services:
            yield self.Resp(status=3)  # SERVICE_UNKNOWN
            return
        last = None
        while context.is_active():
            with self.cond:
                if last == self.serving:
                    self.cond.wait(1.0)
                now = self.serving
            if now != last:
                last = now
                yield self.Resp(status=1 if now else 2)

    def handler(self):
        return grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.check, request_deserializer=self.Req.FromString, response_serializer=self.Resp.SerializeToString),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.watch, request_deserializer=self.Req.FromString, response_serializer=self.Resp.SerializeToString),
        })


class Reflection:
    """grpc.reflection.v1.ServerReflection (and v1alpha, whose messages are the
    same on the wire): list_services, file_by_filename and
    file_containing_symbol, enough for the gateway and for grpcurl."""

    MAX_REQUESTS = 1000  # per stream: a client cannot keep a thread forever

    def __init__(self, contract, services):
        self.contract = contract
        self.services = sorted(services)
        self.Req = contract.message("grpc.reflection.v1.ServerReflectionRequest")
        self.Resp = contract.message("grpc.reflection.v1.ServerReflectionResponse")

    def _answer(self, req):
        resp = self.Resp(original_request=req)
        kind = req.WhichOneof("message_request")
        if kind == "list_services":
            for name in self.services:
                resp.list_services_response.service.add(name=name)
            return resp
        name = None
        if kind == "file_by_filename" and req.file_by_filename in self.contract.files:
            name = req.file_by_filename
        elif kind == "file_containing_symbol":
            try:
                name = self.contract.pool.FindFileContainingSymbol(req.file_containing_symbol).name
            except KeyError:
                name = None
        elif kind not in ("file_by_filename",):
            resp.error_response.error_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
            resp.error_response.error_message = "not supported by this worker: " + str(kind)
            return resp
        if name is None:
            resp.error_response.error_code = grpc.StatusCode.NOT_FOUND.value[0]
            resp.error_response.error_message = "not found"
            return resp
        resp.file_descriptor_response.file_descriptor_proto.extend(self.contract.file_with_imports(name))
        return resp

    def stream(self, requests, context):
        for i, req in enumerate(requests):
            if i >= self.MAX_REQUESTS:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many reflection requests on one stream")
            yield self._answer(req)

    def handlers(self):
        h = grpc.stream_stream_rpc_method_handler(
            self.stream, request_deserializer=self.Req.FromString, response_serializer=self.Resp.SerializeToString)
        return [grpc.method_handlers_generic_handler(s, {"ServerReflectionInfo": h})
                for s in ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")]


class Announcer:
    """Publishes the worker's announcement on NATS every interval, at once on a
    discovery probe, and its health changes (DRAINING, then NOT_SERVING)."""

    def __init__(self, url, worker_id, address, toolkits, interval, user=None, password=None, token=None):
        self.worker_id, self.address, self.toolkits, self.interval = worker_id, address, toolkits, interval
        self.health = SERVING
        self.lock = threading.Lock()  # orders announcements: none follows the final NOT_SERVING
        self.final = False
        self.stopped = threading.Event()
        self.probed = threading.Event()
        self.nc = natsclient.Client(url, name="toolfleet-worker " + worker_id, user=user, password=password,
                                    token=token, on_message=self._on_probe, on_connect=self.publish)
        self.nc.subscribe(DISCOVER_SUBJECT)
        self.thread = threading.Thread(target=self._loop, name="announcer", daemon=True)

    def start(self):
        self.nc.start()
        self.thread.start()

    def _on_probe(self, subject, _payload):
        if subject == DISCOVER_SUBJECT:
            self.probed.set()  # answered by the loop: a burst of probes costs one announcement

    def _loop(self):
        next_tick = time.monotonic() + self.interval
        while not self.stopped.is_set():
            probed = self.probed.wait(max(0.0, next_tick - time.monotonic()))
            if self.stopped.is_set():
                return
            self.probed.clear()
            self.publish()
            if probed:
                self.stopped.wait(PROBE_GAP)  # at most one probe answer per gap
            else:
                next_tick = time.monotonic() + self.interval

    def message(self, health):
        ttl = 3 * self.interval
        return json.dumps({
            "workerId": self.worker_id,
            "address": self.address,
            "toolkits": self.toolkits,
            "health": health,
            "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "ttl": ("%.3fs" % ttl),
            "callJournal": True,  # this worker keeps the call journal: send it claims
        }, separators=(",", ":")).encode()

    def publish(self):
        with self.lock:
            if self.final:
                return
            if not self.nc.publish(ANNOUNCE_SUBJECT, self.message(self.health)):
                log.debug("announcement not sent: NATS not connected")

    def drain(self):
        """Announces DRAINING now and at every heartbeat until stop."""
        self.health = DRAINING
        self.publish()

    def stop(self):
        """Announces NOT_SERVING once, flushes (bounded) and closes."""
        self.stopped.set()
        self.probed.set()  # wakes the loop, which sees stopped
        with self.lock:
            self.final = True
            sent = self.nc.publish(ANNOUNCE_SUBJECT, self.message(NOT_SERVING))
        if not sent or not self.nc.flush(2.0):
            log.warning("NOT_SERVING announcement may be lost")
        self.nc.close()


class Worker:
    """Serves toolkits (service name -> implementation) from a Contract."""

    def __init__(self, contract, toolkits, listen="127.0.0.1:0", advertise="", nats_url="",
                 nats_user=None, nats_password=None, nats_token=None, worker_id="",
                 announce_interval=5.0, shutdown_timeout=10.0, max_workers=16):
        self.contract = contract
        self.impls = toolkits
        self.listen = listen
        self.advertise = advertise
        self.nats = (nats_url, nats_user, nats_password, nats_token)
        self.worker_id = worker_id or "%s-%s-%s" % ("python", socket.gethostname(), os.urandom(4).hex())
        self.announce_interval = announce_interval
        self.shutdown_timeout = shutdown_timeout
        self.max_workers = max_workers
        self.draining = threading.Event()
        self.inflight = 0
        self.idle = threading.Condition()
        self.stop_requested = threading.Event()
        self.addr = None
        self.journal = None  # a Journal once NATS is set up; a claim without one is refused

    # -- calls ---------------------------------------------------------------

    def _tool_handler(self, service, method, fn, contract_timeout, response_class):
        version = self.contract.toolkit(service)["version"]

        def handle(request, context):
            with self.idle:
                refuse = self.draining.is_set()
                if not refuse:
                    self.inflight += 1
            if refuse:
                # The call did not run: the trailer tells the gateway to try another replica.
                context.set_trailing_metadata(((DRAINING_TRAILER, "1"),))
                context.abort(grpc.StatusCode.UNAVAILABLE, "worker is draining; call another replica")
            try:
                return self._call(service, method, fn, contract_timeout, request, context, version, response_class)
            finally:
                with self.idle:
                    self.inflight -= 1
                    self.idle.notify_all()
        return handle

    def _call(self, service, method, fn, contract_timeout, request, context, version, response_class):
        md = {k: v for k, v in context.invocation_metadata()}
        # The deadline: the caller's (grpc-timeout), else the contract's, else 30 s.
        left = context.time_remaining()  # None or "infinite" when the caller set no deadline
        if left is None or left > MAX_DEADLINE:
            left = contract_timeout or DEFAULT_TIMEOUT
        elif contract_timeout:
            left = min(left, contract_timeout)
        try:
            accept = int(md.get(ACCEPT_RESULT_BYTES_KEY, "0"))
        except ValueError:
            accept = 0
        call = Call(method, md.get(CALL_ID_KEY, ""), md.get(TRACEPARENT_KEY, ""), time.monotonic() + left, accept,
                    urllib.parse.unquote(md.get(PRINCIPAL_KEY, "")), urllib.parse.unquote(md.get(PRINCIPAL_VIA_KEY, "")),
                    {k[len(CREDENTIAL_KEY_PREFIX):]: v for k, v in md.items() if k.startswith(CREDENTIAL_KEY_PREFIX)})
        log.info("call method=%s.%s call_id=%s deadline_ms=%d principal=%s via=%s traceparent=%s",
                 service, method, call.call_id or "-", int(left * 1000), call.principal or "-", call.via or "-",
                 call.traceparent or "-")
        if left <= 0:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed before it started")
        started = self._start(md.get(CLAIM_KEY), call, context) if CLAIM_KEY in md else None
        out, status = None, None  # status: (code, message, google.rpc.Status or None) when it failed
        try:
            out = fn(request, call)
        except ToolError as e:
            status = (grpc.StatusCode.UNKNOWN, e.message, self._tool_error_status(e))
        except Exception:  # a bug: logged here, never sent to the caller
            log.exception("tool %s.%s failed (call_id=%s)", service, method, call.call_id or "-")
            status = (grpc.StatusCode.INTERNAL, "the tool failed unexpectedly", None)
        if status is None and not isinstance(out, response_class):
            log.error("tool %s.%s returned %s, not %s (call_id=%s)", service, method, type(out).__name__,
                      response_class.DESCRIPTOR.full_name, call.call_id or "-")
            status = (grpc.StatusCode.INTERNAL, "the tool failed unexpectedly", None)
        if status is None and call.remaining() <= 0:
            status = (grpc.StatusCode.DEADLINE_EXCEEDED, "the tool did not finish within the call's deadline", None)
        logs = self._tool_logs(call)
        trailer = ((LOG_TRAILER, logs.SerializeToString()),) if logs is not None else ()
        if status is not None and status[2] is not None:
            trailer = ((STATUS_DETAILS_KEY, status[2].SerializeToString()),) + trailer
        if started is not None:
            rev = started.finish(self._outcome(version, out, status, logs))
            if rev is not None:
                trailer += ((FINISHED_TRAILER, str(rev)),)
        if trailer:
            context.set_trailing_metadata(trailer)
        if status is not None:
            context.abort(status[0], status[1])
        return out

    def _start(self, value, call, context):
        """Records a claimed call as started, or refuses it without running the
        tool: UNAVAILABLE with the toolfleet-not-started trailer."""
        try:
            claim = Claim.parse(value)
        except ValueError as e:
            log.error("call_id=%s: %s; not run", call.call_id or "-", e)
            self._not_started(context, JOURNAL_UNAVAILABLE, JOURNAL_UNAVAILABLE_MESSAGE)
        if self.journal is None:
            log.error("call_id=%s: a claimed call, and this worker has no NATS connection; not run", call.call_id or "-")
            self._not_started(context, JOURNAL_UNAVAILABLE, JOURNAL_UNAVAILABLE_MESSAGE)
        try:
            started = self.journal.start(claim, max(0.001, min(JOURNAL_WRITE_TIMEOUT, call.remaining())))
        except JournalMoved as e:
            log.warning("call_id=%s: claim lost on %s at revision %d (%s); not run",
                        call.call_id or "-", claim.subject, claim.revision, e)
            self._not_started(context, CLAIM_LOST, CLAIM_LOST_MESSAGE)
        except JournalError as e:
            log.warning("call_id=%s: cannot record the start on %s (%s); not run", call.call_id or "-", claim.subject, e)
            self._not_started(context, JOURNAL_UNAVAILABLE, JOURNAL_UNAVAILABLE_MESSAGE)
        log.info("journal: call_id=%s started on %s at revision %d", call.call_id or "-", claim.subject, started.revision)
        return started

    @staticmethod
    def _not_started(context, why, message):
        context.set_trailing_metadata(((NOT_STARTED_TRAILER, why),))
        context.abort(grpc.StatusCode.UNAVAILABLE, message)

    def _outcome(self, version, out, status, logs):
        """The serialized toolfleet.v1.WorkerCallOutcome of a finished call: the
        answer as the gateway receives it."""
        o = self.contract.message("toolfleet.v1.WorkerCallOutcome")(toolkit_version=version, worker_id=self.worker_id)
        if status is None:
            o.output = out.SerializeToString()
        else:
            o.code, o.message = status[0].value[0], status[1]
            if status[2] is not None:
                o.details.extend(status[2].details)
        if logs is not None:
            o.logs.CopyFrom(logs)
        return o.SerializeToString()

    def _tool_logs(self, call):
        """The call's caller log, a toolfleet.v1.ToolLogs: None when nothing was logged."""
        if not call.logs and not call.logs_dropped:
            return None
        logs = self.contract.message("toolfleet.v1.ToolLogs")(dropped=call.logs_dropped)
        for level, message, ns in call.logs:
            line = logs.lines.add(level=level, message=message)
            line.time.seconds, line.time.nanos = divmod(ns, 1_000_000_000)
        return logs

    def _tool_error_status(self, e):
        """An execution error's google.rpc.Status: code UNKNOWN with a toolfleet.v1.ToolError detail."""
        te = self.contract.message("toolfleet.v1.ToolError")(
            message=e.message, developer_message=e.developer_message, can_retry=e.can_retry,
            retry_after_ms=e.retry_after_ms, additional_prompt_content=e.prompt_hint)
        st = self.contract.message("google.rpc.Status")(code=grpc.StatusCode.UNKNOWN.value[0], message=e.message)
        st.details.add(type_url="type.googleapis.com/toolfleet.v1.ToolError", value=te.SerializeToString())
        return st

    def _service_handler(self, name, impl):
        sd = self.contract.service(name)
        handlers = {}
        for m in sd.methods:
            fn = getattr(impl, m.name, None)
            if fn is None:
                raise ValueError("%s does not implement %s.%s" % (type(impl).__name__, name, m.name))
            req, resp = self.contract.message(m.input_type.full_name), self.contract.message(m.output_type.full_name)
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                self._tool_handler(name, m.name, fn, self.contract.timeout(name, m.name), resp),
                request_deserializer=req.FromString, response_serializer=resp.SerializeToString)
        return grpc.method_handlers_generic_handler(name, handlers)

    # -- life cycle ----------------------------------------------------------

    def request_stop(self, *_):
        self.stop_requested.set()

    def run(self):
        """Serves until SIGTERM or SIGINT (or request_stop), then leaves politely."""
        names = list(self.impls)
        health = Health(self.contract, names)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=4 * self.max_workers,  # beyond it: RESOURCE_EXHAUSTED, not a queue
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
        server.add_generic_rpc_handlers([self._service_handler(n, i) for n, i in self.impls.items()]
                                        + [health.handler()]
                                        + Reflection(self.contract, names + ["grpc.health.v1.Health",
                                                     "grpc.reflection.v1.ServerReflection",
                                                     "grpc.reflection.v1alpha.ServerReflection"]).handlers())
        host = self.listen.rsplit(":", 1)[0]
        port = server.add_insecure_port(self.listen)
        if port == 0:
            raise OSError("cannot listen on " + self.listen)
        self.addr = "%s:%d" % (host, port)
        server.start()
        advertise = self.advertise or self.addr
        toolkits = [self.contract.toolkit(n) for n in names]
        announcer = None
        if self.nats[0]:
            announcer = Announcer(self.nats[0], self.worker_id, advertise, toolkits, self.announce_interval,
                                  user=self.nats[1], password=self.nats[2], token=self.nats[3])
            self.journal = Journal(announcer.nc, self.worker_id)
            announcer.start()
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        log.info("worker serving addr=%s advertise=%s toolkits=%s nats=%s", self.addr, advertise,
                 ",".join("%s@%s" % (t["name"], t["version"]) for t in toolkits), bool(announcer))
        while not self.stop_requested.wait(0.5):
            pass

        # Leave politely: refuse new calls (UNAVAILABLE + the draining trailer, so the
        # gateway moves them to another replica), say DRAINING so the gateway stops
        # sending them, let the calls in flight finish, then say NOT_SERVING and go.
        started = time.monotonic()
        log.info("worker draining inflight=%d timeout_s=%.1f", self.inflight, self.shutdown_timeout)
        self.draining.set()
        health.set_serving(False)
        if announcer:
            announcer.drain()
            # Linger a moment, refusing, so that the gateway has seen DRAINING before
            # the port closes: a call sent to a closed server is cut, not refused.
            time.sleep(min(DRAIN_LINGER, self.announce_interval, self.shutdown_timeout))
        with self.idle:
            self.idle.wait_for(lambda: self.inflight == 0,
                               timeout=max(0.0, self.shutdown_timeout - (time.monotonic() - started)))
            left_over = self.inflight
        if left_over:
            log.warning("drain timed out; cutting %d calls", left_over)
        if announcer:
            announcer.stop()
        server.stop(grace=max(0.0, self.shutdown_timeout - (time.monotonic() - started))).wait()
        log.info("worker stopped")
