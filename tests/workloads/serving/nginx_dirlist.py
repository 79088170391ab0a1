"""nginx (Debian's package: one process, one thread) whose one slow request is a directory
listing (autoindex) of a huge directory: nginx reads the whole directory (readdir and a
stat per entry, all from the dentry/inode caches: CPU), sorts it and renders the HTML in
one go on its only thread, so every other request waits behind it.

  python nginx_dirlist.py WORKDIR [--port PORT] [--files 35000]

Makes WORKDIR/root/big/ with FILES empty files (long names sharing a long prefix, so the
sort and the escaping cost CPU), WORKDIR/nginx.conf (daemon off, master_process off: the
process that serves is nginx itself, single-threaded), prints "port <port>",
"files <n>", "tid main <pid>", then replaces itself with nginx (same PID). nginx prints
nothing when it listens: wait for GET /ping to answer. GET /big/ is the slow request.
"""
import argparse
import os
import shutil
import socket
from pathlib import Path

CONF = """daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {work}/tmp/body;
    proxy_temp_path {work}/tmp/proxy;
    fastcgi_temp_path {work}/tmp/fastcgi;
    uwsgi_temp_path {work}/tmp/uwsgi;
    scgi_temp_path {work}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {work}/root;
        location = /ping {{ default_type text/plain; return 200 "ok\\n"; }}
        location /big/ {{ autoindex on; }}
    }}
}}
"""
PREFIX = "quarterly-report-" + "x" * 130 + "-"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--files", type=int, default=50000)
    args = ap.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        raise SystemExit("no nginx here: install Debian's nginx (make setup)")
    work = Path(args.workdir).resolve()
    big = work / "root" / "big"
    big.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    have = len(os.listdir(big))
    for i in range(have, args.files):
        os.close(os.open(big / f"{PREFIX}{i:07d}.csv", os.O_CREAT | os.O_WRONLY, 0o644))
    port = args.port or free_port()
    (work / "nginx.conf").write_text(CONF.format(work=work, port=port))
    print("port", port)
    print("files", args.files)
    print("tid main", os.getpid(), flush=True)
    os.execv(nginx, [nginx, "-p", str(work), "-e", str(work / "error.log"), "-c", str(work / "nginx.conf")])


if __name__ == "__main__":
    main()
