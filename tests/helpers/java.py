"""Java workloads of the tests: build a Maven project's jar once, read a JVM's lines, end it.

  jar = maven_jar(SOURCE, "fixengine")   # SOURCE/target/fixengine.jar, rebuilt when a source is newer
  wait_line(proc, "ready", 60); stop(proc)
"""
import os
import select
import shutil
import subprocess
import time
from pathlib import Path


def maven_jar(source: Path, name: str) -> Path:
    """`source`/target/`name`.jar, built with Maven when a source is newer than it (the first
    build downloads the dependencies and plugins from Maven Central)."""
    jar = source / "target" / f"{name}.jar"
    sources = [source / "pom.xml", *source.rglob("*.java")]
    if jar.exists() and all(s.stat().st_mtime <= jar.stat().st_mtime for s in sources):
        return jar
    mvn = shutil.which("mvn")
    if not mvn:
        raise RuntimeError(f"no mvn here: install Maven (Debian: maven) to build {source}")
    cp = subprocess.run([mvn, "-q", "-B", "package", "-DskipTests"], cwd=source, capture_output=True, text=True, timeout=900)
    if cp.returncode != 0 or not jar.exists():
        raise RuntimeError(f"mvn package failed in {source}:\n{(cp.stdout + cp.stderr)[-3000:]}")
    return jar


def wait_line(proc, want, timeout):
    """Read the process' stdout until a line equal to `want`; fail with what it printed."""
    end, seen = time.monotonic() + timeout, []
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip())
            if line.strip() == want:
                return
        elif proc.poll() is not None:
            break
    raise RuntimeError(f"no {want!r} from {proc.args}: {seen[-20:]}")


def stop(proc):
    """End a process this test started (by its Popen), and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def threads(pid):
    """comm -> TIDs of a process' threads (a JVM's thread names, cut to 15 characters)."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out.setdefault(Path(f"/proc/{pid}/task/{t}/comm").read_text().strip(), []).append(int(t))
        except OSError:
            pass
    return out
