"""A Pyroscope push receiver for tests: what a real Pyroscope does with
`POST /push.v1.PusherService/Push`, down to its status codes and error bodies,
with every request it accepts recorded for the test to read. Python 3.11
standard library only (no protobuf package: a small decoder below).

    r = start()                  # 127.0.0.1, a port the OS picks
    ... point the agent at r.url ...
    r.wait_for(1)                # series received, with a deadline
    s = r.received[0]            # Series(labels={...}, profiles=[raw bytes], ids=[...])
    p = decode_pprof(s.profiles[0])
    r.stop()

    python3 pyroscope_receiver.py serve --out DIR [--port N]   # prints "listening URL", writes what it gets to DIR
    python3 pyroscope_receiver.py                              # self-test

The call is a Connect unary call with the binary codec (connectrpc.com/docs/protocol;
connectrpc/connect-go handler.go, protocol_connect.go, protocol.go), as Pyroscope
serves it (grafana/pyroscope pkg/api/api.go: RegisterPusherServiceHandler with
pkg/api/connect's options: vtproto codec, gzip), in connect-go's order:

- another path: 404 (Go's http.NotFound); another method on the path: 405, `Allow: POST`
- a Content-Type other than `application/proto`: 415, `Accept-Post`, no body (connect-go
  handler.go). Pyroscope also takes `application/json` and gRPC; this receiver does not:
  waitmeter sends binary protobuf.
- `Content-Encoding` other than identity or gzip: 501 `unimplemented`
- `Connect-Protocol-Version` other than 1: 400 `invalid_argument` (absent is fine: Pyroscope
  does not require it)
- a body over the limit: 429 `resource_exhausted`; bad gzip, or a PushRequest that does not
  decode (truncated, wrong wire type for a known field as vtproto reports, invalid UTF-8 in a
  string): 400 `invalid_argument`
- then Pyroscope's own checks (pkg/distributor/distributor.go Push, pkg/validation/validate.go):
  a raw_profile that does not decode as pprof (gzipped or not): 500 `unknown` (Pyroscope returns
  that error unwrapped, which connect-go maps to unknown); no profile at all: 400 "no profiles
  received"; labels or profiles its validation rejects: 400 `invalid_argument`.
- success: 200, `Content-Type: application/proto`, empty body (PushResponse has no fields).

Errors carry `Content-Type: application/json` and `{"code": ..., "message": ...}`, the HTTP
status from the Connect code table. Where this receiver differs on purpose:

- It is strict where Pyroscope releases differ: `service_name` is required (recent distributors
  substitute `unknown_service`), label names must be `[a-zA-Z_][a-zA-Z0-9_]*` (recent ones turn
  `.` into `_`), `__name__` must be one too (older ones: a legacy metric name; now any UTF-8).
  It also rejects a `:` in `__name__` or a sample type or unit: Pyroscope stores it, but its
  profile type id `name:type:unit:period_type:period_unit` then no longer splits right.
- A request is taken whole or not at all (Pyroscope may ingest the valid series of a request
  and still answer with the error of another).
"""
import argparse
import dataclasses
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PUSH_PATH = "/push.v1.PusherService/Push"
# Pyroscope's default limits (pkg/validation/limits.go)
MAX_BODY = 256 << 20            # distributor.ingestion-body-limit-mb, before decompression
MAX_PROFILE = 4 << 20           # validation.max-profile-size-bytes, uncompressed
MAX_SAMPLES = 16000             # validation.max-profile-stacktrace-samples
MAX_SAMPLE_LABELS = 100         # validation.max-profile-stacktrace-sample-labels
MAX_LABEL_NAMES = 30            # validation.max-label-names-per-series
MAX_LABEL_NAME_LEN = 1024
MAX_LABEL_VALUE_LEN = 2048
# trace and span ids stay sample labels (pkg/model/pprofsplit, pkg/pprof)
NOT_PROMOTED = {"trace_id", "span_id", "profile_id"}

# Connect codes and their HTTP statuses (connectrpc.com/docs/protocol#error-codes)
CODE_STATUS = {
    "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
    "not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
    "failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
    "internal": 500, "unavailable": 503, "data_loss": 500, "unauthenticated": 401,
}

NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


class ProtoError(ValueError):
    """Bytes that are not the protobuf message they should be."""


class ConnectError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        assert code in CODE_STATUS, code
        self.code, self.message = code, message


# --- protobuf wire format -------------------------------------------------------------------

def _varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise ProtoError("truncated varint")
        if shift >= 64:
            raise ProtoError("varint longer than 10 bytes")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v & (2**64 - 1), i
        shift += 7


def fields(b):
    """The fields of a message: (number, wire type, value) in order; value is an int for
    varints and fixed-width fields, bytes for length-delimited ones."""
    b = memoryview(b).tobytes() if not isinstance(b, bytes) else b
    out, i = [], 0
    while i < len(b):
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        if num == 0 or num > 2**29 - 1:
            raise ProtoError(f"invalid field number {num}")
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            if i + 8 > len(b):
                raise ProtoError("truncated fixed64")
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            if n > len(b) - i:
                raise ProtoError(f"field {num}: length {n} past the end ({len(b) - i} bytes left)")
            v, i = b[i:i + n], i + n
        elif wt == 5:
            if i + 4 > len(b):
                raise ProtoError("truncated fixed32")
            v, i = int.from_bytes(b[i:i + 4], "little"), i + 4
        else:  # 3, 4: groups (proto2 only); 6, 7: not wire types
            raise ProtoError(f"field {num}: wire type {wt}")
        out.append((num, wt, v))
    return out


def _expect(num, wt, want, what):
    if wt != want:
        raise ProtoError(f"{what}: wrong wire type {wt} for field {num}")


def _string(v, what):
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtoError(f"{what}: invalid UTF-8") from e


def _int64(v):
    return v - 2**64 if v >= 2**63 else v


def _repeated_varints(num, wt, v, what):
    """A repeated scalar field: packed (length-delimited) or one value per field."""
    if wt == 0:
        return [v]
    _expect(num, wt, 2, what)
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


@dataclasses.dataclass
class Series:
    labels: dict          # name -> value
    profiles: list        # raw_profile bytes, as sent (gzipped or not)
    ids: list             # RawSample.ID, "" when not set
    label_pairs: list = dataclasses.field(default_factory=list, repr=False)  # in order, duplicates kept


def decode_push_request(body):
    """push.v1.PushRequest (api/push/v1/push.proto) -> [Series]."""
    series = []
    for num, wt, v in fields(body):
        if num != 1:
            continue  # unknown: skipped, as protobuf decoders do
        _expect(num, wt, 2, "PushRequest.series")
        pairs, profiles, ids = [], [], []
        for n2, w2, v2 in fields(v):
            if n2 == 1:  # types.v1.LabelPair labels
                _expect(n2, w2, 2, "RawProfileSeries.labels")
                name = value = ""
                for n3, w3, v3 in fields(v2):
                    if n3 in (1, 2):
                        _expect(n3, w3, 2, "LabelPair")
                        s = _string(v3, "LabelPair")
                        name, value = (s, value) if n3 == 1 else (name, s)
                pairs.append((name, value))
            elif n2 == 2:  # RawSample samples
                _expect(n2, w2, 2, "RawProfileSeries.samples")
                raw, pid = b"", ""
                for n3, w3, v3 in fields(v2):
                    if n3 == 1:
                        _expect(n3, w3, 2, "RawSample.raw_profile")
                        raw = v3
                    elif n3 == 2:
                        _expect(n3, w3, 2, "RawSample.ID")
                        pid = _string(v3, "RawSample.ID")
                profiles.append(raw)
                ids.append(pid)
            # 3: annotations, which Pyroscope drops from pushes
        series.append(Series(dict(pairs), profiles, ids, pairs))
    return series


# --- pprof ---------------------------------------------------------------------------------

def decode_pprof(raw):
    """A pprof profile (perftools.profiles.Profile; gunzipped first if gzipped) as a dict:
    sample_types [(type, unit)], samples [{values, labels {key: str}, num_labels {key: int},
    stack [function names, leaf first]}], period_type, period, time_nanos, duration_nanos,
    comments, default_sample_type, string_table. Raises ProtoError on anything malformed:
    string 0 not empty, an index past the string table, an unknown location or function id,
    a sample whose value count is not the sample types'."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise ProtoError(f"gzip: {e}") from e
    p = fields(raw)
    strings = []
    for n, wt, v in p:
        if n == 6:
            _expect(n, wt, 2, "string_table")
            strings.append(_string(v, "string_table"))
    if not strings or strings[0] != "":
        raise ProtoError("string_table[0] must be \"\"")

    def s(i):
        i = _int64(i)
        if not 0 <= i < len(strings):
            raise ProtoError(f"string index {i} past the table ({len(strings)})")
        return strings[i]

    def msg(v):
        return {n: (wt, x) for n, wt, x in fields(v)}  # last one wins, as protobuf merges scalars

    def val(m, n):
        if n not in m:
            return 0
        if m[n][0] != 0:
            raise ProtoError(f"field {n}: wrong wire type {m[n][0]}")
        return m[n][1]

    def value_type(v):
        m = msg(v)
        return (s(val(m, 1)), s(val(m, 2)))

    functions = {}
    for n, wt, v in p:
        if n == 5:
            _expect(n, wt, 2, "function")
            m = msg(v)
            functions[val(m, 1)] = {"name": s(val(m, 2)), "system_name": s(val(m, 3)),
                                    "filename": s(val(m, 4)), "start_line": _int64(val(m, 5))}
    locations = {}
    for n, wt, v in p:
        if n == 4:
            _expect(n, wt, 2, "location")
            lid, address, names = 0, 0, []
            for n2, w2, v2 in fields(v):
                if n2 == 1:
                    lid = v2
                elif n2 == 3:
                    address = v2
                elif n2 == 4:
                    _expect(n2, w2, 2, "Location.line")
                    lm = msg(v2)
                    fid = val(lm, 1)
                    if fid not in functions:
                        raise ProtoError(f"line of location {lid}: unknown function {fid}")
                    names.append(functions[fid]["name"])
            # inlined frames: line[0] is the innermost, so names are already leaf first
            locations[lid] = names or [f"0x{address:x}"]
    if 0 in locations or 0 in functions:
        raise ProtoError("id 0 (ids are nonzero)")
    sample_types = [value_type(v) for n, wt, v in p if n == 1]
    samples = []
    for n, wt, v in p:
        if n != 2:
            continue
        _expect(n, wt, 2, "sample")
        ids, values, labels, num_labels = [], [], {}, {}
        for n2, w2, v2 in fields(v):
            if n2 == 1:
                ids += _repeated_varints(n2, w2, v2, "Sample.location_id")
            elif n2 == 2:
                values += [_int64(x) for x in _repeated_varints(n2, w2, v2, "Sample.value")]
            elif n2 == 3:
                _expect(n2, w2, 2, "Sample.label")
                lm = msg(v2)
                key = s(val(lm, 1))
                if val(lm, 2):
                    labels[key] = s(val(lm, 2))
                else:
                    num_labels[key] = _int64(val(lm, 3))
        if len(values) != len(sample_types):
            raise ProtoError(f"a sample has {len(values)} values for {len(sample_types)} sample types")
        stack = []
        for i in ids:
            if i not in locations:
                raise ProtoError(f"sample: unknown location {i}")
            stack += locations[i]
        samples.append({"values": values, "labels": labels, "num_labels": num_labels, "stack": stack})
    top = {n: (wt, v) for n, wt, v in p}
    comments = [s(c) for n, wt, v in p if n == 13 for c in _repeated_varints(n, wt, v, "comment")]
    return {
        "sample_types": sample_types,
        "samples": samples,
        "period_type": value_type(top[11][1]) if 11 in top else ("", ""),
        "period": _int64(val(top, 12)),
        "time_nanos": _int64(val(top, 9)),
        "duration_nanos": _int64(val(top, 10)),
        "comments": comments,
        "default_sample_type": s(val(top, 14)),
        "string_table": strings,
        "raw_size": len(raw),
    }


def find_go():
    """The go binary, or None."""
    for g in (shutil.which("go"), "/usr/local/go/bin/go"):
        if g and os.access(g, os.X_OK):
            return g
    return None


def go_pprof(path, *args, timeout=120):
    """stdout of `go tool pprof ARGS PATH` (raises FileNotFoundError without Go,
    CalledProcessError when pprof fails)."""
    go = find_go()
    if go is None:
        raise FileNotFoundError("go is not installed")
    cp = subprocess.run([go, "tool", "pprof", *args, str(path)], capture_output=True, text=True,
                        timeout=timeout, check=False)
    if cp.returncode != 0:
        raise subprocess.CalledProcessError(cp.returncode, cp.args, cp.stdout, cp.stderr)
    return cp.stdout


def go_pprof_raw(path):
    """stdout of `go tool pprof -raw PATH`: the profile as Go's reader sees it."""
    return go_pprof(path, "-raw")


# --- Pyroscope's checks --------------------------------------------------------------------

def _check_labels(pairs, what):
    """pkg/validation/validate.go ValidateLabels, at its strictest (see the module doc)."""
    if not pairs:
        raise ConnectError("invalid_argument", "error at least one label pair is required per profile")
    if len(pairs) > MAX_LABEL_NAMES:
        raise ConnectError("invalid_argument", f"{what} has {len(pairs)} label names; limit {MAX_LABEL_NAMES}")
    labels = dict(pairs)
    name = labels.get("__name__", "")
    if not NAME.match(name):
        raise ConnectError("invalid_argument", f"invalid labels {what} with error: invalid metric name {name!r}")
    if not labels.get("service_name"):
        raise ConnectError("invalid_argument", f"invalid labels {what} with error: service name is not provided")
    seen = set()
    for n, v in pairs:
        if len(n) > MAX_LABEL_NAME_LEN:
            raise ConnectError("invalid_argument", f"{what} has label name too long: {n[:64]!r}")
        if len(v.encode()) > MAX_LABEL_VALUE_LEN:
            raise ConnectError("invalid_argument", f"{what} has label value too long: {v[:64]!r}")
        if not NAME.match(n):
            raise ConnectError("invalid_argument", f"invalid labels {what} with error: invalid label name {n!r}")
        if n in seen:
            raise ConnectError("invalid_argument", f"{what} has duplicate label name: {n!r}")
        seen.add(n)


def _check_profile(series_pairs, p):
    """pkg/validation/validate.go ValidateProfile, and the sample labels promoted to series
    labels (pkg/model/pprofsplit VisitSampleSeries) checked as series labels."""
    if not p["sample_types"]:
        raise ConnectError("invalid_argument", "empty profile")
    if p["raw_size"] > MAX_PROFILE:
        raise ConnectError("invalid_argument", f"the profile exceeds the size limit ({p['raw_size']} > {MAX_PROFILE})")
    if len(p["samples"]) > MAX_SAMPLES:
        raise ConnectError("invalid_argument", f"the profile exceeds the samples count limit ({len(p['samples'])} > {MAX_SAMPLES})")
    for t, _ in p["sample_types"]:
        if "-" in t:
            raise ConnectError("invalid_argument", "sample type contains -")
    for part in [x for t in p["sample_types"] for x in t] + list(p["period_type"]):
        if ":" in part:  # stricter than Pyroscope: see the module doc
            raise ConnectError("invalid_argument", f"sample type or unit {part!r} contains : (the profile type id splits on it)")
    names = {n for n, _ in series_pairs}
    label_sets = set()
    for smp in p["samples"]:
        if len(smp["labels"]) + len(smp["num_labels"]) > MAX_SAMPLE_LABELS:
            raise ConnectError("invalid_argument", "the profile exceeds the sample labels limit")
        extra = tuple(sorted((k, v) for k, v in smp["labels"].items() if k not in names and k not in NOT_PROMOTED))
        label_sets.add(extra)
    for extra in label_sets:
        _check_labels(series_pairs + list(extra), f"series {dict(series_pairs)} with sample labels {dict(extra)}")


# --- the server ----------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Go's server
    server_version = "pyroscope-receiver"
    sys_version = ""

    def log_message(self, fmt, *args):
        if self.server.receiver.verbose:
            super().log_message(fmt, *args)

    def _send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.server.receiver._log_request(self, status)

    def _error(self, e):
        body = json.dumps({"code": e.code, "message": e.message}).encode()
        self._send(CODE_STATUS[e.code], body, [("Content-Type", "application/json"), ("Accept-Encoding", "gzip")])

    def _read_body(self):
        """The request content (Content-Length or chunked), or None past MAX_BODY (then the
        connection is closed, as the rest is not read)."""
        te = self.headers.get("Transfer-Encoding", "")
        if te:
            if te.strip().lower() != "chunked":
                self.close_connection = True
                return None
            out = bytearray()
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    self.close_connection = True
                    return None
                out += self.rfile.read(size)
                self.rfile.readline(3)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            return None
        return self.rfile.read(n)

    def _not_push(self):
        path = self.path.split("?", 1)[0]
        if path != PUSH_PATH:
            self._read_body()
            self._send(404, b"404 page not found\n", [("Content-Type", "text/plain; charset=utf-8"),
                                                     ("X-Content-Type-Options", "nosniff")])
            return True
        return False

    def do_POST(self):
        if self._not_push():
            return
        body = self._read_body()
        ctype = self.headers.get("Content-Type", "").strip().lower()
        if ctype != "application/proto":
            self._send(415, b"", [("Accept-Post", "application/proto")])
            return
        try:
            if body is None:
                raise ConnectError("resource_exhausted", f"message is larger than configured max {MAX_BODY}")
            self._push(body)
        except ConnectError as e:
            self._error(e)

    def _push(self, body):
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            raise ConnectError("unimplemented", f"unknown compression {encoding!r}: supported encodings are gzip")
        version = self.headers.get("Connect-Protocol-Version")
        if version is not None and version != "1":
            raise ConnectError("invalid_argument", f"Connect-Protocol-Version must be \"1\": got {version!r}")
        if encoding == "gzip" and body:  # zero-length content is never decompressed
            try:
                d = zlib.decompressobj(wbits=31)
                body = d.decompress(body, MAX_BODY + 1)
                if len(body) > MAX_BODY:
                    raise ConnectError("resource_exhausted", f"message is larger than configured max {MAX_BODY}")
                if not d.eof:
                    raise ConnectError("invalid_argument", "decompress: unexpected EOF")
            except zlib.error as e:
                raise ConnectError("invalid_argument", f"decompress: {e}") from e
        try:
            series = decode_push_request(body)
        except ProtoError as e:
            raise ConnectError("invalid_argument", f"unmarshal message: {e}") from e
        decoded = []
        for s in series:
            for raw in s.profiles:
                try:
                    decoded.append((s, decode_pprof(raw)))
                except ProtoError as e:
                    raise ConnectError("unknown", f"raw profile: {e}") from e
        if not decoded:
            raise ConnectError("invalid_argument", "no profiles received")
        for s, p in decoded:
            _check_labels(s.label_pairs, str(s.labels))
            _check_profile(s.label_pairs, p)
        self.server.receiver._record(series)
        self._send(200, b"", [("Content-Type", "application/proto"), ("Accept-Encoding", "gzip")])

    def _method_not_allowed(self):
        if not self._not_push():
            self._read_body()
            self._send(405, b"", [("Allow", "POST")])

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _method_not_allowed


class Receiver:
    """A running receiver: `url` (no trailing slash: the agent appends the path), `received`
    (Series, in order of arrival), `requests` (one dict per request: method, path, headers
    with lowercase names, status)."""

    def __init__(self, host="127.0.0.1", port=0, out_dir=None, verbose=False, ssl_context=None):
        self.received, self.requests = [], []
        self.out_dir, self.verbose = (Path(out_dir) if out_dir else None), verbose
        self._lock = threading.Condition()
        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._server.receiver = self
        scheme = "http"
        if ssl_context is not None:  # HTTPS, as Pyroscope behind TLS (or Grafana Cloud) serves it
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="pyroscope-receiver", daemon=True)
        self._thread.start()

    def _record(self, series):
        with self._lock:
            for s in series:
                n = len(self.received)
                self.received.append(s)
                if self.out_dir:
                    self._write(n, s)
            self._lock.notify_all()

    def _write(self, n, s):
        stem = f"{n:05d}-{_safe(s.labels.get('service_name', ''))}-{_safe(s.labels.get('__name__', ''))}"
        for i, raw in enumerate(s.profiles):
            suffix = ".pb.gz" if raw[:2] == b"\x1f\x8b" else ".pb"
            (self.out_dir / f"{stem}-{i}{suffix}").write_bytes(raw)
        (self.out_dir / f"{stem}.labels.json").write_text(json.dumps(s.label_pairs) + "\n")

    def _log_request(self, handler, status):
        with self._lock:
            self.requests.append({"method": handler.command, "path": handler.path, "status": status,
                                  "headers": {k.lower(): v for k, v in handler.headers.items()}})

    def wait_for(self, n, timeout=30.0):
        """Block until at least n series have been received; the series. Raises TimeoutError."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.received) >= n, timeout):
                raise TimeoutError(f"{len(self.received)} series received in {timeout}s, waited for {n}; "
                                   f"requests: {[(r['method'], r['path'], r['status']) for r in self.requests]}")
            return list(self.received)

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _safe(s):
    return re.sub(r"[^A-Za-z0-9_.]", "_", s)[:64] or "_"


def start(out_dir=None, verbose=False, ssl_context=None):
    """A receiver on 127.0.0.1, on a port the OS picks (HTTPS with an ssl.SSLContext)."""
    return Receiver(out_dir=out_dir, verbose=verbose, ssl_context=ssl_context)


# --- self-test -----------------------------------------------------------------------------

def _v(x):
    x &= 2**64 - 1
    out = bytearray()
    while x >= 0x80:
        out.append(x & 0x7F | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _f(num, payload):  # a length-delimited field
    return _v(num << 3 | 2) + _v(len(payload)) + payload


def _i(num, x):  # a varint field
    return _v(num << 3) + _v(x)


def _pprof(strings, functions, locations, samples, sample_types, period_type=(0, 0)):
    """A profile from tables of indices (tests only)."""
    out = b"".join(_f(1, _i(1, t) + _i(2, u)) for t, u in sample_types)
    for locs, values, labels in samples:
        out += _f(2, _f(1, b"".join(map(_v, locs))) + _f(2, b"".join(map(_v, values)))
                  + b"".join(_f(3, _i(1, k) + _i(2, v)) for k, v in labels))
    out += b"".join(_f(4, _i(1, lid) + _f(4, _i(1, fid) + _i(2, line))) for lid, fid, line in locations)
    out += b"".join(_f(5, _i(1, fid) + _i(2, name) + _i(4, file)) for fid, name, file in functions)
    out += b"".join(_f(6, s.encode()) for s in strings)
    out += _f(11, _i(1, period_type[0]) + _i(2, period_type[1])) + _i(12, 1)
    return out


def _push_request(series):
    out = b""
    for labels, profiles in series:
        one = b"".join(_f(1, _f(1, n.encode()) + _f(2, v.encode())) for n, v in labels)
        one += b"".join(_f(2, _f(1, p) + _f(2, b"id-1")) for p in profiles)
        out += _f(1, one)
    return out


def self_test():
    import http.client
    import tempfile

    strings = ["", "wait", "nanoseconds", "take_gil", "worker", "main", "app.py", "thread", "w-1", "state", "gil"]
    ix = {s: i for i, s in enumerate(strings)}
    prof = _pprof(strings, functions=[(1, ix["take_gil"], ix["app.py"]), (2, ix["worker"], ix["app.py"]), (3, ix["main"], ix["app.py"])],
                  locations=[(1, 1, 10), (2, 2, 20), (3, 3, 30)],
                  samples=[([1, 2, 3], [3_000_000_000], [(ix["thread"], ix["w-1"]), (ix["state"], ix["gil"])]),
                           ([2, 3], [-5 & (2**64 - 1)], [])],
                  sample_types=[(ix["wait"], ix["nanoseconds"])], period_type=(ix["wait"], ix["nanoseconds"]))
    gz = gzip.compress(prof)
    labels = [("__name__", "waitmeter"), ("service_name", "selftest")]
    body = _push_request([(labels, [gz, prof])])

    with tempfile.TemporaryDirectory() as out, start(out_dir=out) as r:
        host, port = r.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)

        def post(payload, headers=None, path=PUSH_PATH, method="POST"):
            h = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}
            h.update(headers or {})
            h = {k: v for k, v in h.items() if v is not None}
            conn.request(method, path, body=payload, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), data

        def connect_error(status, code, *args, **kw):
            st, h, data = post(*args, **kw)
            assert st == status, (st, data)
            assert h["content-type"] == "application/json", h
            err = json.loads(data)
            assert err["code"] == code and err["message"], err
            return err["message"]

        # accepted, on one kept-alive connection: plain and gzipped bodies
        st, h, data = post(body)
        assert (st, h["content-type"], data) == (200, "application/proto", b""), (st, h, data)
        st, h, data = post(gzip.compress(body), {"Content-Encoding": "gzip"})
        assert st == 200, (st, data)
        got = r.wait_for(2, timeout=5)
        assert len(got) == 2 and got[0].labels == dict(labels) and got[0].profiles == [gz, prof], got[0]
        assert got[0].ids == ["id-1", "id-1"]
        assert got[1].profiles == got[0].profiles
        p = decode_pprof(got[0].profiles[0])
        assert p["sample_types"] == [("wait", "nanoseconds")] and p["period_type"] == ("wait", "nanoseconds"), p
        assert p["samples"][0] == {"values": [3_000_000_000], "labels": {"thread": "w-1", "state": "gil"},
                                   "num_labels": {}, "stack": ["take_gil", "worker", "main"]}, p["samples"][0]
        assert p["samples"][1]["values"] == [-5] and p["samples"][1]["stack"] == ["worker", "main"]
        assert decode_pprof(got[0].profiles[1]) == {**p, "raw_size": len(prof)}
        written = sorted(os.listdir(out))
        assert written == ["00000-selftest-waitmeter-0.pb.gz", "00000-selftest-waitmeter-1.pb",
                           "00000-selftest-waitmeter.labels.json", "00001-selftest-waitmeter-0.pb.gz",
                           "00001-selftest-waitmeter-1.pb", "00001-selftest-waitmeter.labels.json"], written

        # the protocol's errors, in connect-go's order
        st, h, data = post(body, {"Content-Type": "application/json"})
        assert (st, h.get("accept-post"), data) == (415, "application/proto", b""), (st, h, data)
        st, _, _ = post(body, {"Content-Type": None})
        assert st == 415
        st, h, data = post(None, method="GET")
        assert (st, h.get("allow")) == (405, "POST"), (st, h)
        st, _, data = post(body, path="/push.v1.PusherService/Nope")
        assert st == 404, st
        connect_error(501, "unimplemented", body, {"Content-Encoding": "br"})
        connect_error(400, "invalid_argument", body, {"Connect-Protocol-Version": "2"})
        connect_error(400, "invalid_argument", b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"})
        assert "unmarshal" in connect_error(400, "invalid_argument", body[:-3])       # truncated
        assert "unmarshal" in connect_error(400, "invalid_argument", b"\x0a\x01\x08")  # labels as a varint
        assert "unmarshal" in connect_error(400, "invalid_argument", b"\x08\x01")      # series as a varint
        # Pyroscope's checks
        assert "no profiles" in connect_error(400, "invalid_argument", b"")
        connect_error(500, "unknown", _push_request([(labels, [b"\x0a\xff"])]))
        connect_error(500, "unknown", _push_request([(labels, [gz[:-9]])]))
        assert "service name" in connect_error(400, "invalid_argument", _push_request([(labels[:1], [gz])]))
        assert "metric name" in connect_error(400, "invalid_argument", _push_request([(labels[1:], [gz])]))
        assert "duplicate" in connect_error(400, "invalid_argument", _push_request([(labels + [("a", "1"), ("a", "2")], [gz])]))
        assert "label name" in connect_error(400, "invalid_argument", _push_request([(labels + [("k8s.pod", "x")], [gz])]))
        dash = _pprof(["", "wait-time", "ns"], [], [], [], [(1, 2)])
        assert "contains" in connect_error(400, "invalid_argument", _push_request([(labels, [dash])]))
        bad_key = _pprof(["", "wait", "ns", "bad-key", "v"], [], [], [([], [1], [(3, 4)])], [(1, 2)])
        assert "bad-key" in connect_error(400, "invalid_argument", _push_request([(labels, [bad_key])]))
        assert len(r.received) == 2, "a rejected request records nothing"
        conn.close()

        # Go's reader agrees with decode_pprof
        if find_go():
            path = Path(out) / "00000-selftest-waitmeter-0.pb.gz"
            raw_text = go_pprof_raw(path)
            assert "wait/nanoseconds" in raw_text and "3000000000: 1 2 3" in raw_text and "thread:[w-1]" in raw_text, raw_text
            top = go_pprof(path, "-top", "-sample_index=wait")
            assert "take_gil" in top, top
        else:
            print("skipping the go tool pprof check: go is not installed", file=sys.stderr)
    print("pyroscope_receiver self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    serve = sub.add_parser("serve", help="receive pushes and write their profiles to --out")
    serve.add_argument("--out", required=True, help="directory for NNNNN-<service>-<name>-<i>.pb[.gz] and .labels.json")
    serve.add_argument("--port", type=int, default=0, help="0: one the OS picks")
    serve.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if args.cmd != "serve":
        self_test()
        return
    os.makedirs(args.out, exist_ok=True)
    r = Receiver(port=args.port, out_dir=args.out, verbose=args.verbose)
    print(f"listening {r.url}", flush=True)  # the readiness signal
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        r.stop()


if __name__ == "__main__":
    main()
