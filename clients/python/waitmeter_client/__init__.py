"""waitmeter_client: tell waitmeter how old the thing your thread handles is.

    import waitmeter_client
    waitmeter_client.observe_age(time.time() - message.sent_at)

Each call sends one datagram (pid, thread id, age, timestamp) to the agent's
Unix socket (``$WAITMETER_SOCKET``, default ``/run/waitmeter/age.sock``), so
waitmeter can join the age with what the calling thread waited for.

It never blocks and never raises into your code: when the agent is absent,
slow or its socket is full, the sample is dropped and counted
(``dropped()``). Thread-safe: the counters are exact whatever the number of
threads calling, and a process has one socket (a forked child its own).
Dependency-free, typed (PEP 561), Python 3.8+.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Optional, SupportsFloat, Tuple

__all__ = ["observe_age", "configure", "dropped", "sent", "DEFAULT_SOCKET"]
__version__ = "0.1.0"

DEFAULT_SOCKET = "/run/waitmeter/age.sock"
# shared with the agent (agent/src/age/socket.rs): magic, pid, tid, age s, unix time s
_RECORD = struct.Struct("<4sIIdd")
_MAGIC = b"WMA1"

# Guards the counters and the creation of the socket; never held around I/O
# (sendto runs outside it, on a non-blocking socket).
_lock = threading.Lock()
# this process' socket and the pid it was made in: one tuple, read and
# replaced whole, so that a thread never pairs a socket with another's pid
_conn: Optional[Tuple[int, socket.socket]] = None
_path = os.environ.get("WAITMETER_SOCKET", DEFAULT_SOCKET)
_dropped = 0
_sent = 0


def configure(path: Optional[str] = None) -> None:
    """Send to ``path`` (default: $WAITMETER_SOCKET or DEFAULT_SOCKET)."""
    global _path
    _path = path or os.environ.get("WAITMETER_SOCKET", DEFAULT_SOCKET)


def _socket() -> socket.socket:
    """This process' socket, made on first use (a forked child makes its own)."""
    global _conn
    pid = os.getpid()
    conn = _conn
    if conn is not None and conn[0] == pid:
        return conn[1]  # made already: no lock on the hot path
    with _lock:  # one thread makes it; those racing it here use that one
        old = _conn
        if old is not None and old[0] == pid:
            return old[1]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        _conn = (pid, s)
    if old is not None:  # a forked child: its copy of the parent's socket
        old[1].close()  # (closes the child's descriptor only)
    return s


def _after_fork_in_child() -> None:
    # fork() copies only the forking thread: a lock another thread held then
    # would stay held in the child forever, and observe_age would block on it.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def observe_age(seconds: SupportsFloat) -> None:
    """Record that the calling thread now handles something ``seconds`` old."""
    global _dropped, _sent
    try:
        data = _RECORD.pack(_MAGIC, os.getpid(), threading.get_native_id(), float(seconds), time.time())
        _socket().sendto(data, _path)  # non-blocking, outside the lock
        with _lock:
            _sent += 1
    except Exception:  # never raise into the application: count and go on
        with _lock:
            _dropped += 1


def dropped() -> int:
    """Samples that could not be sent (no agent, agent too slow, bad value)."""
    return _dropped


def sent() -> int:
    """Samples handed to the agent's socket."""
    return _sent
