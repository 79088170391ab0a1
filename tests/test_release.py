"""The release artefacts of `make release` (dist/), each checked by its real consumer: the static
binary in an empty root, the wheel installed by pip into a fresh venv of a pyenv CPython that has
no Rust in its PATH (then `attach` from it on the GIL workload), the container image run by buildah,
the chart package read by helm, the SBOM validated against the CycloneDX 1.5 schema, SHA256SUMS by
sha256sum. `make test` builds them first (integration depends on release)."""
import json
import os
import re
import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import IN_CI, ROOT, Workload, by_tid
from test_gil import pyenv_python

DIST = ROOT / "dist"
ARCH = os.uname().machine
VERSION = tomllib.loads((ROOT / "agent" / "Cargo.toml").read_text())["package"]["version"]
HELM = Path(os.environ.get("HELM") or ROOT / ".tools" / "bin" / "helm")
WORKLOAD = ROOT / "tests" / "workloads" / "gil_holder.py"


def artefact(pattern):
    found = sorted(DIST.glob(pattern))
    if len(found) != 1:
        pytest.fail(f"dist/{pattern}: {len(found)} files ({[f.name for f in found]}): run `make release`")
    return found[0]


def test_sha256sums_cover_every_artefact_and_verify():
    sums = artefact("SHA256SUMS")
    listed = {line.split()[1] for line in sums.read_text().splitlines()}
    present = {p.name for p in DIST.iterdir() if p.name != "SHA256SUMS"}
    assert listed == present, f"listed but absent: {listed - present}; present but not listed: {present - listed}"
    cp = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=DIST, capture_output=True, text=True)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_the_binary_is_static_and_runs_in_an_empty_root(tmp_path):
    binary = artefact(f"waitmeter-linux-{ARCH}")
    dyn = subprocess.run(["readelf", "-dl", str(binary)], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" not in dyn and "INTERP" not in dyn, "the release binary loads shared libraries"
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    # nothing but the binary: no libc, no /etc, no /proc
    shutil.copy2(binary, tmp_path / "waitmeter")
    cp = subprocess.run(["chroot", str(tmp_path), "/waitmeter", "--version"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and cp.stdout.strip() == f"waitmeter {VERSION}", cp


def wheel_of(pattern):
    whl = artefact(pattern)
    with zipfile.ZipFile(whl) as z:
        return whl, {n: z.read(n) for n in z.namelist()}


def test_the_wheel_carries_the_static_binary_as_a_script():
    whl, files = wheel_of(f"waitmeter-{VERSION}-*.whl")
    info = f"waitmeter-{VERSION}.dist-info"
    tags = re.findall(r"^Tag: (\S+)$", files[f"{info}/WHEEL"].decode(), re.M)
    assert f"py3-none-manylinux_2_17_{ARCH}" in tags, tags
    meta = files[f"{info}/METADATA"].decode()
    assert "License-Expression: Apache-2.0" in meta and f"Version: {VERSION}" in meta, meta[:600]
    assert f"{info}/licenses/LICENSE" in files
    script = files[f"waitmeter-{VERSION}.data/scripts/waitmeter"]
    assert script == artefact(f"waitmeter-linux-{ARCH}").read_bytes(), "the wheel's binary is not the release binary"
    assert any(n.startswith(f"{info}/sboms/") for n in files), "maturin's SBOM is missing from the wheel"


def fresh_venv(tmp_path):
    """A venv of a pyenv CPython, made and used with a PATH that has no Rust toolchain in it."""
    py = pyenv_python(12) or pyenv_python(11)
    if not py:
        pytest.fail("no pyenv CPython 3.11 or 3.12 here")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    for tool in ("cargo", "rustc", "cc", "clang"):
        where = shutil.which(tool, path=env["PATH"])
        assert tool in ("cc", "clang") or where is None, f"{tool} is on the bare PATH ({where})"
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", str(venv)], env=env, check=True, timeout=120)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    return venv, env, py


@pytest.mark.needs_root
@pytest.mark.timeout(300)
def test_pip_install_the_wheel_then_attach_from_it(tmp_path):
    """Issue 17's first test: pip installs the wheel (no index, no Rust), and the installed
    `waitmeter` says its version and measures the GIL workload: ingest waits behind processor."""
    whl = artefact(f"waitmeter-{VERSION}-*.whl")
    venv, env, py = fresh_venv(tmp_path)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--quiet", str(whl)], env=env, check=True, timeout=120)
    exe = venv / "bin" / "waitmeter"
    assert shutil.which("waitmeter", path=env["PATH"]) == str(exe)
    cp = subprocess.run(["waitmeter", "--version"], env=env, capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and cp.stdout.strip() == f"waitmeter {VERSION}", cp
    with Workload(py, WORKLOAD) as w:
        cp = subprocess.run(["waitmeter", "attach", "-p", str(w.pid), "--duration", "3", "--output", "json"],
                            env=env, capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        report = json.loads(cp.stdout)
    assert report["python"], report.get("python")
    ingest = by_tid(report)[w.tids["ingest"]]
    gil = ingest["seconds"]["gil_wait"]
    assert gil > 0.3 * sum(ingest["seconds"].values()), ingest["seconds"]
    assert ingest["gil_wait_by_holder"].get(str(w.tids["processor"]), 0) >= 0.8 * gil, ingest["gil_wait_by_holder"]
    # pip can take it back out: nothing else was installed
    subprocess.run([str(venv / "bin" / "pip"), "uninstall", "--yes", "--quiet", "waitmeter"], env=env, check=True, timeout=60)
    assert not exe.exists()


def test_the_client_wheel_is_pure_python_and_typed():
    _, files = wheel_of("waitmeter_client-*-py3-none-any.whl")
    assert "waitmeter_client/py.typed" in files and "waitmeter_client/__init__.py" in files, sorted(files)
    meta = next(v for k, v in files.items() if k.endswith(".dist-info/METADATA")).decode()
    assert "License-Expression: Apache-2.0" in meta, meta[:600]


def buildah():
    exe = shutil.which("buildah")
    if not exe:
        pytest.fail("buildah is not installed: `make image` installs it (Debian's buildah)")
    return [exe, "--root", str(ROOT / ".tools" / "containers"), "--runroot", str(ROOT / ".tools" / "containers-run")]


@pytest.mark.needs_root
@pytest.mark.timeout(300)
def test_the_image_runs_the_release_binary():
    archive = artefact(f"waitmeter-{VERSION}.oci.tar")
    env = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}
    run = lambda *a, **kw: subprocess.run([*buildah(), *a], env=env, capture_output=True, text=True, timeout=120, **kw)
    cp = run("from", "--pull-never", "--name", f"waitmeter-test-{os.getpid()}", f"oci-archive:{archive}")
    assert cp.returncode == 0, cp.stderr
    ctr = cp.stdout.strip().splitlines()[-1]
    try:
        cfg = json.loads(run("inspect", "--type", "container", ctr).stdout)["OCIv1"]["config"]
        assert cfg["Entrypoint"] == ["/usr/bin/waitmeter"], cfg
        assert cfg["Cmd"][:2] == ["run", "--all"] and "9747/tcp" in cfg["ExposedPorts"], cfg
        assert cfg["User"] == "0:0", cfg
        cp = run("run", ctr, "--", "/usr/bin/waitmeter", "--version")
        assert cp.returncode == 0 and cp.stdout.strip() == f"waitmeter {VERSION}", cp
    finally:
        run("rm", ctr)


def test_the_chart_package_is_the_chart():
    if not (HELM.is_file() and os.access(HELM, os.X_OK)):
        pytest.fail(f"helm not found at {HELM}: run `make setup`")
    chart = (ROOT / "helm" / "waitmeter" / "Chart.yaml").read_text()
    version = re.search(r"^version: (\S+)", chart, re.M).group(1)
    tgz = artefact(f"waitmeter-{version}.tgz")
    shown = subprocess.run([str(HELM), "show", "chart", str(tgz)], capture_output=True, text=True, check=True).stdout
    assert re.search(rf'^appVersion: "?{re.escape(VERSION)}"?$', shown, re.M), f"the chart's appVersion is not the agent's {VERSION}:\n{shown}"
    out = subprocess.run([str(HELM), "template", "w", str(tgz)], capture_output=True, text=True, check=True).stdout
    assert f"waitmeter:{VERSION}" in out, "the packaged chart does not render the release image"


def test_the_sbom_is_valid_cyclonedx_and_names_what_is_linked_in():
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    sbom = artefact(f"waitmeter-{VERSION}.cdx.json")
    text = sbom.read_text()
    validator = JsonStrictValidator(SchemaVersion.V1_5)
    assert validator.validate_str(text) is None
    doc = json.loads(text)
    broken = json.dumps({**doc, "components": [{**doc["components"][0], "type": "not-a-type"}]})
    assert validator.validate_str(broken) is not None, "the validator accepts anything"
    names = {c["name"]: c["version"] for c in doc["components"]}
    deps = tomllib.loads((ROOT / "agent" / "Cargo.toml").read_text())["dependencies"]
    missing = [d for d in deps if d not in names]
    assert not missing, f"direct dependencies missing from the SBOM: {missing}"
    for deb, name in (("libc6-dev", "glibc"), ("libelf-dev", "elfutils-libelf"), ("zlib1g-dev", "zlib")):
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", deb], capture_output=True, text=True).stdout
        assert names.get(name) == version, (name, names.get(name), version)
    assert names.get("libbpf") == names["libbpf-sys"].split("+v")[-1]
    root = doc["metadata"]["component"]["bom-ref"]
    on = next(d["dependsOn"] for d in doc["dependencies"] if d["ref"] == root)
    assert sum("pkg:deb/" in r for r in on) == 3, on


@pytest.mark.skipif(not IN_CI, reason="only CI starts from a clean dist/")
def test_nothing_else_is_in_dist():
    names = sorted(p.name for p in DIST.iterdir())
    assert len(names) == 7, names
