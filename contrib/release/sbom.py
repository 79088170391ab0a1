#!/usr/bin/env python3
"""The release's SBOM: maturin's CycloneDX document from the wheel (every Rust crate the agent
is built from), completed with the C libraries the static binary carries, which Cargo does not
know of: glibc, libelf and zlib from the Debian packages they were linked from, and libbpf as
libbpf-sys vendors it.

    sbom.py WHEEL OUT.cdx.json

Reads nothing from the network. Fails with one line when the wheel has no SBOM or a library's
package is not installed.
"""
import json
import subprocess
import sys
import zipfile

# the static archives linked into the binary (Makefile: static), by the Debian package shipping them
STATIC_DEBS = {
    "libc6-dev": ("glibc", "LGPL-2.1-or-later"),
    "libelf-dev": ("elfutils-libelf", "LGPL-3.0-or-later OR GPL-2.0-or-later"),
    "zlib1g-dev": ("zlib", "Zlib"),
}


def deb_version(pkg):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version} ${Architecture}", pkg], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        sys.exit(f"sbom.py: Debian package {pkg} is not installed: it provides a library the static binary links (make setup-build installs it)")
    version, arch = out.stdout.split()
    return version, arch


def main(wheel, out):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if ".dist-info/sboms/" in n and n.endswith(".json")]
        if not names:
            sys.exit(f"sbom.py: {wheel} has no CycloneDX SBOM (.dist-info/sboms/): build it with maturin >= 1.9")
        bom = json.loads(z.read(names[0]))
    comps = bom.setdefault("components", [])
    have = {c.get("bom-ref") for c in comps}
    deps = {d["ref"]: d for d in bom.setdefault("dependencies", [])}

    def depends(on_by, ref):
        d = deps.get(on_by)
        if d is None:
            d = deps[on_by] = {"ref": on_by, "dependsOn": []}
            bom["dependencies"].append(d)
        if ref not in d.setdefault("dependsOn", []):
            d["dependsOn"].append(ref)
        if ref not in deps:
            deps[ref] = {"ref": ref, "dependsOn": []}
            bom["dependencies"].append(deps[ref])

    root = bom["metadata"]["component"]["bom-ref"]
    for c in comps:
        if c.get("name") == "libbpf-sys":
            # libbpf-sys 1.7.0+v1.7.0 vendors and links libbpf v1.7.0
            ver = c["version"].split("+v")[-1]
            ref = f"pkg:github/libbpf/libbpf@v{ver}"
            if ref not in have:
                comps.append({"type": "library", "bom-ref": ref, "name": "libbpf", "version": ver, "purl": ref,
                              "licenses": [{"expression": "LGPL-2.1-only OR BSD-2-Clause"}],
                              "description": "vendored by libbpf-sys, linked statically"})
            depends(c["bom-ref"], ref)
            break
    for pkg, (name, lic) in STATIC_DEBS.items():
        version, arch = deb_version(pkg)
        ref = f"pkg:deb/debian/{pkg}@{version}?arch={arch}"
        if ref not in have:
            comps.append({"type": "library", "bom-ref": ref, "name": name, "version": version, "purl": ref,
                          "licenses": [{"expression": lic}],
                          "description": f"linked statically from Debian's {pkg}"})
        depends(root, ref)
    with open(out, "w") as f:
        json.dump(bom, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: sbom.py WHEEL OUT.cdx.json")
    main(*sys.argv[1:])
