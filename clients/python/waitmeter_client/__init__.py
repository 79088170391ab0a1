"""waitmeter_client: tell waitmeter how old the thing your thread handles is.

    import waitmeter_client
    waitmeter_client.observe_age(time.time() - message.sent_at)

Each call sends one datagram (pid, thread id, age, timestamp) to the agent's
Unix socket (``$WAITMETER_SOCKET``, default ``/run/waitmeter/age.sock``), so
waitmeter can join the age with what the calling thread waited for.

It never blocks and never raises into your code: when the agent is absent,
slow or its socket is full, the sample is dropped and counted
(``dropped()``). Dependency-free, Python 3.8+.
"""
import os
import socket
import struct
import threading
import time

__all__ = ["observe_age", "configure", "dropped", "sent", "DEFAULT_SOCKET"]
__version__ = "0.1.0"

DEFAULT_SOCKET = "/run/waitmeter/age.sock"
# shared with the agent (agent/src/age/socket.rs): magic, pid, tid, age s, unix time s
_RECORD = struct.Struct("<4sIIdd")
_MAGIC = b"WMA1"

_lock = threading.Lock()
_sock = None
_path = os.environ.get("WAITMETER_SOCKET", DEFAULT_SOCKET)
_dropped = 0
_sent = 0
_pid = os.getpid()


def configure(path=None):
    """Send to ``path`` (default: $WAITMETER_SOCKET or DEFAULT_SOCKET)."""
    global _path
    _path = path or os.environ.get("WAITMETER_SOCKET", DEFAULT_SOCKET)


def _socket():
    global _sock, _pid
    pid = os.getpid()
    if _sock is None or pid != _pid:  # a forked child gets its own socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        _sock, _pid = s, pid
    return _sock


def observe_age(seconds):
    """Record that the calling thread now handles something ``seconds`` old."""
    global _dropped, _sent
    try:
        data = _RECORD.pack(_MAGIC, os.getpid(), threading.get_native_id(), float(seconds), time.time())
        _socket().sendto(data, _path)
        _sent += 1
    except Exception:  # never raise into the application: count and go on
        with _lock:
            _dropped += 1


def dropped():
    """Samples that could not be sent (no agent, agent too slow, bad value)."""
    return _dropped


def sent():
    return _sent
