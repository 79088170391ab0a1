"""A PostgreSQL server of Debian's for the tests: its own user, its own folder, a Unix socket.

`Postgres()` starts one (initdb, pg_ctl) as the `postgres` user in a folder of its own under /tmp
(which that user can reach), listening on a Unix socket only; `close()` stops it and removes the
folder. `psql(sql)` runs SQL as the superuser; `pgbench(...)` runs Debian's own load tool against it.
"""
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path


class Postgres:
    """A PostgreSQL server of Debian's, run as its `postgres` user in a folder of its own under /tmp
    (which that user can reach), on a Unix socket only; stopped and removed at the end."""

    def __init__(self):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        assert bins, "PostgreSQL is installed (make setup installs Debian's postgresql)"
        self.bin = os.path.dirname(bins[-1])
        self.top = Path(tempfile.mkdtemp(prefix="wm-pg-", dir="/tmp"))
        self.dir, self.sock, self.port = self.top / "pg", self.top / "sock", 54329
        user = pwd.getpwnam("postgres")
        for d in (self.top, self.dir, self.sock):
            d.mkdir(exist_ok=True)
            os.chown(d, user.pw_uid, user.pw_gid)
        os.chmod(self.top, 0o755)
        self.su([f"{self.bin}/initdb", "-D", str(self.dir), "-A", "trust", "-U", "postgres"])
        self.su([f"{self.bin}/pg_ctl", "-D", str(self.dir), "-w", "-l", str(self.sock / "log"), "-o",
                 f"-k {self.sock} -p {self.port} -c listen_addresses=", "start"])

    @staticmethod
    def su(argv):
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120)

    def close(self):
        try:
            self.su([f"{self.bin}/pg_ctl", "-D", str(self.dir), "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.top, ignore_errors=True)

    def psql(self, sql):
        """Run `sql` as the superuser; its output, unaligned, tuples only."""
        r = subprocess.run(["runuser", "-u", "postgres", "--", f"{self.bin}/psql", "-h", str(self.sock), "-p", str(self.port),
                            "-U", "postgres", "-At", "-q", "-c", sql], check=True, capture_output=True, text=True, timeout=120)
        return r.stdout

    def pgbench(self, script, clients, seconds, options="", jobs=2):
        """Start pgbench with `script` (SQL text, pgbench's syntax) for `seconds` (a Popen, output
        on stdout); `options` are the sessions' settings (PGOPTIONS)."""
        path = self.top / f"bench-{len(list(self.top.glob('bench-*')))}.sql"
        path.write_text(script)
        path.chmod(0o644)
        return subprocess.Popen(["runuser", "-u", "postgres", "--", "env", f"PGOPTIONS={options}", f"{self.bin}/pgbench",
                                 "-h", str(self.sock), "-p", str(self.port), "-U", "postgres", "-n", "-c", str(clients),
                                 "-j", str(jobs), "-T", str(seconds), "-f", str(path), "postgres"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def postmaster(self):
        """The postmaster's PID (its pid file's first line)."""
        return int((self.dir / "postmaster.pid").read_text().split()[0])

    def sample_waits(self, seconds, application="pgbench", every=0.02):
        """The server's own account of its backends' waits: pg_stat_activity's `wait_event_type:
        wait_event` ("-:-" when not waiting: running, or idle in no wait event) of each backend
        of `application`, sampled every `every` s for `seconds` by one session of its own.
        Returns ({event: samples}, the backends' PIDs seen)."""
        import collections
        import time
        query = ("select pid, coalesce(wait_event_type, '-') || ':' || coalesce(wait_event, '-') from pg_stat_activity "
                 f"where backend_type = 'client backend' and application_name = '{application}';\nselect 'end';\n")
        p = subprocess.Popen(["runuser", "-u", "postgres", "--", f"{self.bin}/psql", "-h", str(self.sock), "-p", str(self.port),
                              "-U", "postgres", "-At", "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        events, pids = collections.Counter(), set()
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                p.stdin.write(query)
                p.stdin.flush()
                for line in iter(p.stdout.readline, ""):
                    if line.strip() == "end":
                        break
                    pid, _, event = line.strip().partition("|")
                    if event:
                        events[event] += 1
                        pids.add(int(pid))
                time.sleep(every)
        finally:
            p.stdin.close()
            p.wait(timeout=30)
        return events, pids
