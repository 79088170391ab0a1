"""The FIX engine workload (tests/workloads/fixengine: QuickFIX/J from Maven Central): build
it once, run an acceptor and an initiator, end both by PID.

  with fix_pair("spin") as f:   # one "QFJ Message Processor" thread serves five sessions
      f.acceptor.pid, f.metrics_url, f.processor_tids()
"""
import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

from java import maven_jar, stop, threads, wait_line

SOURCE = Path(__file__).resolve().parent.parent / "workloads" / "fixengine"
JAR = SOURCE / "target" / "fixengine.jar"


def build():
    """The workload's jar, built with Maven when a source is newer than it."""
    return maven_jar(SOURCE, "fixengine")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FixPair:
    def __init__(self, acceptor, initiator, metrics_url):
        self.acceptor, self.initiator, self.metrics_url = acceptor, initiator, metrics_url

    def threads(self):
        """comm -> TIDs of the acceptor's threads."""
        return threads(self.acceptor.pid)

    def processor_tids(self):
        """The acceptor's message-processing thread ("QFJ Message Processor", cut to 15 characters)."""
        return self.threads().get("QFJ Message Pro", [])


@contextlib.contextmanager
def fix_pair(mode, slow_ms=20, rate=50, warmup=4.0, jvm=()):
    """An acceptor in `mode` (spin, block, threaded, locked) started with JVM options `jvm`, and
    an initiator sending `rate` orders a second per session, logged on and past the JVMs' first
    compilations (`warmup` seconds)."""
    jar, java = build(), shutil.which("java") or "java"
    port, metrics = free_port(), free_port()
    acc = subprocess.Popen([java, *jvm, "-jar", str(jar), "acceptor", "--port", str(port), "--mode", mode, "--slow-ms", str(slow_ms)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ini = None
    try:
        wait_line(acc, "ready", 60)
        ini = subprocess.Popen([java, "-jar", str(jar), "initiator", "--port", str(port), "--rate", str(rate),
                                "--metrics-port", str(metrics)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        wait_line(ini, "logged on", 60)
        time.sleep(warmup)
        yield FixPair(acc, ini, f"http://127.0.0.1:{metrics}/metrics")
    finally:
        if ini is not None:
            stop(ini)
        stop(acc)
