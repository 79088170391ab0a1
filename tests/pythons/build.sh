#!/usr/bin/env bash
# The CPython interpreters the tests need beyond the machine's pyenv builds
# (3.8–3.13): 3.14, 3.15 and the free-threaded 3.14t, built from the upstream
# tarballs Debian keeps in its archive pool (python.org and GitHub are not
# reachable here; Debian's source index points at newer files the mirror no
# longer serves, so the tarballs are fetched from the pool by name and pinned
# by sha256), through the Debian mirror the machine's apt is configured with.
# Plus a copy of 3.14 whose libpython is stripped of every symbol table but
# .dynsym, as distributions ship it.
#
#   tests/pythons/build.sh DEST     (make setup runs it with DEST=.pythons)
#
# Gives DEST/bin/python3.14, python3.15, python3.14t (symlinks to the
# interpreters), python3.14-stripped, and python3.14-debian, python3.15-debian
# (Debian sid's own builds in a chroot): scripts that exec the interpreter, so
# the process is that interpreter.
#
# The builds are kept outside the clone, in WAITMETER_CACHE (default
# ~/.cache/waitmeter), each in a folder named by its tarball's sha256 and its
# configure flags: a fresh clone on a machine that built them once links them
# in seconds; a new pin builds a new folder. A plain build (shared libpython,
# no PGO/LTO) takes 3.5–4.5 min each on 2 cores.
set -euo pipefail

dest=$(realpath -m "${1:?usage: build.sh DEST}")
cache=$(realpath -m "${WAITMETER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/waitmeter}")/pythons

# the machine's Debian mirror: the first apt source (deb822 or one-line) of the
# main archive (not -security, -updates or a third party's)
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' "$f" \
      | tr ' ' '\n' | grep -E '^https?://[^[:space:]]+/debian/?$' | head -1 || true)
    [ -n "$uri" ] && { echo "${uri%/}"; return; }
  done
  echo "pythons: no Debian archive among apt's sources (/etc/apt/sources.list*): add one, then rerun" >&2
  exit 1
}
mirror=$(debian_mirror)
pool=$mirror/pool/main/p
# name  tarball  sha256  configure flags
builds=(
  "3.14  python3.14/python3.14_3.14.7.orig.tar.xz        3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81  "
  "3.15  python3.15/python3.15_3.15.0~rc2.orig.tar.xz    8d93af5eaaaea5adfd41bd786a7ba3f03f2ad1ab57c6a65e0b963deab91d5ad7  "
  "3.14t python3.14/python3.14_3.14.7.orig.tar.xz        3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81  --disable-gil"
)
# how they are built: a change here is a new key
recipe="--enable-shared --without-ensurepip --disable-test-modules"
# build dependencies beyond what the agent's build installs (Debian bookworm
# has no libmpdec-dev: CPython's bundled mpdecimal is used)
pkgs="libssl-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev zlib1g-dev libzstd-dev libgdbm-dev libgdbm-compat-dev"

missing=$(for p in $pkgs; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
  echo "pythons: installing" $missing
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

mkdir -p "$cache/src" "$dest/bin"
key() { printf '%s' "$*" | sha256sum | cut -c1-16; }
# DEST/NAME -> the cached build (a folder an older build.sh left there is replaced)
link() {
  if [ -d "$2" ] && [ ! -L "$2" ]; then rm -rf "$2"; fi
  ln -sfn "$1" "$2"
}
for b in "${builds[@]}"; do
  read -r name tarball sum flags <<<"$b"
  prefix="$cache/$name-$(key "$sum" "$flags" "$recipe")"
  if [ -f "$prefix/.ok" ] && [ -x "$prefix/bin/python$name" ]; then
    echo "pythons: CPython $name kept in $prefix"
  else
    file="$cache/src/$(basename "$tarball")"
    if ! echo "$sum  $file" | sha256sum -c --status 2>/dev/null; then
      echo "pythons: downloading $(basename "$tarball") from $mirror"
      curl -fsS --retry 3 -o "$file.part" "$pool/$tarball"
      echo "$sum  $file.part" | sha256sum -c --status || { echo "pythons: $(basename "$tarball"): sha256 mismatch: the archive changed; check it and update the pin in $0" >&2; exit 1; }
      mv "$file.part" "$file"
    fi
    work="$cache/src/build-$name"
    rm -rf "$work" "$prefix" && mkdir -p "$work"
    tar -xJf "$file" -C "$work" --strip-components=1
    echo "pythons: building CPython $name into $prefix (a few minutes, once per machine)"
    (
      cd "$work"
      # shellcheck disable=SC2086 # the flags are words
      ./configure -q --prefix="$prefix" $recipe $flags LDFLAGS="-Wl,-rpath,$prefix/lib" >/dev/null
      make -s -j"$(nproc)" >/dev/null 2>build.log || { tail -30 build.log; exit 1; }
      make -s install >/dev/null 2>>build.log || { tail -30 build.log; exit 1; }
    )
    rm -rf "$work"
    # free-threaded builds install python3.14t; default ones python3.14
    [ -x "$prefix/bin/python$name" ] || { echo "pythons: $prefix/bin/python$name missing after the build" >&2; exit 1; }
    touch "$prefix/.ok"
  fi
  link "$prefix" "$dest/$name"
  ln -sfn "$prefix/bin/python$name" "$dest/bin/python$name"
done

# 3.14 with a stripped libpython: the same build, symbol tables removed; a
# wrapper points the loader at it (LD_LIBRARY_PATH goes before the RUNPATH)
# and execs the interpreter
full=$(readlink -f "$dest/3.14")
stripped="$full-stripped"
if [ ! -f "$stripped/.ok" ]; then
  rm -rf "$stripped"
  cp -a "$full" "$stripped"
  rm -f "$stripped/.ok"
  strip --strip-all "$stripped"/lib/libpython3.14.so.1.0
  if readelf -S "$stripped"/lib/libpython3.14.so.1.0 | grep -q '\.symtab'; then
    echo "pythons: strip left a .symtab in the stripped libpython" >&2
    exit 1
  fi
  touch "$stripped/.ok"
fi
link "$stripped" "$dest/3.14-stripped"
rm -f "$dest/bin/python3.14-stripped"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/python3.14 "$@"\n' "$stripped" "$stripped" >"$dest/bin/python3.14-stripped"
chmod +x "$dest/bin/python3.14-stripped"

# Debian's own final builds (static, stripped but for .dynsym, PGO+LTO, non-PIE,
# glibc 2.41+ so they run only in their own root): a minimal sid chroot (about
# a minute, ~300 MB). Its versions follow sid. A wrapper per interpreter copies
# a script argument that is a file of the host into the chroot and execs the
# interpreter there (the process is that interpreter).
sid="$cache/sid"
if [ ! -f "$sid/.ok" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  echo "pythons: a Debian sid chroot with its python3.14 and python3.15 (debootstrap)"
  rm -rf "$sid"
  debootstrap --variant=minbase --include=python3.14,python3.15 sid "$sid" "$mirror" >"$cache/src/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/src/debootstrap.log"; exit 1; }
  touch "$sid/.ok"
fi
link "$sid" "$dest/sid"
for v in 3.14 3.15; do
  {
    echo '#!/bin/bash'
    echo 'args=()'
    echo 'for a in "$@"; do'
    echo "  if [[ -f \$a ]]; then mkdir -p '$sid/tmp/waitmeter-tests'; cp \"\$a\" '$sid/tmp/waitmeter-tests/'; a=/tmp/waitmeter-tests/\${a##*/}; fi"
    echo '  args+=("$a")'
    echo 'done'
    echo "exec chroot '$sid' /usr/bin/python$v \"\${args[@]}\""
  } >"$dest/bin/python$v-debian"
  chmod +x "$dest/bin/python$v-debian"
done

for p in python3.14 python3.15 python3.14t python3.14-stripped python3.14-debian python3.15-debian; do
  "$dest/bin/$p" -c 'import sys, sysconfig; print("pythons:", sys.argv[1], sys.version.split()[0], "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "default")' "$p"
done
