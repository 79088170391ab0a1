"""Headless Chromium (Debian's package) opening a file from disk the way a person opens it,
with every network request sent to a listener that answers none and keeps what was asked."""
import re
import shutil
import socket
import subprocess
import threading


def chromium():
    path = shutil.which("chromium")
    assert path, "no chromium here: make setup installs Debian's chromium"
    return path


class NoNetwork:
    """A listener every request of the browser is sent to (as its proxy, loopback included):
    it keeps the first line of each (what was asked for) and answers none."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            try:
                c.settimeout(1)
                self.requests.append(c.recv(512).split(b"\r\n")[0].decode(errors="replace"))
            except OSError:
                self.requests.append("(nothing said)")
            c.close()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def browse(page, tmp_path, *flags, fragment=""):
    """Chromium opens `page` from disk, sealed off the network; (its DOM after the script ran,
    what it logged, the requests it tried)."""
    net = NoNetwork()
    try:
        cp = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", f"--proxy-server=http://127.0.0.1:{net.port}",
             "--proxy-bypass-list=<-loopback>", "--enable-logging=stderr", "--v=0", "--window-size=1400,1500",
             "--virtual-time-budget=5000",
             # the browser's own traffic (updates, safe browsing, metrics) off: what is left is the page's
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
             "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--no-pings", "--disable-features=OptimizationHints,MediaRouter",
             *flags, f"file://{page}{fragment}"],
            capture_output=True, text=True, timeout=120)
    finally:
        net.close()
    assert cp.returncode == 0, cp.stderr[-2000:]
    return cp.stdout, cp.stderr, net.requests


# the browser's own services (time, updates, accounts), which it asks whatever page is open;
# every other request would be the page's
BROWSER_OWN = re.compile(r"^(GET|POST|CONNECT) (https?://)?[a-z0-9.-]*\.(google\.com|googleapis\.com|gstatic\.com)[:/ ]")


def pages_requests(requests):
    return [r for r in requests if not BROWSER_OWN.match(r)]


def console_errors(log):
    """What the page said on the console at the error level, or what the browser refused it."""
    return [line for line in log.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
            or "Refused to" in line or "Content Security Policy" in line]
