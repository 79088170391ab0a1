#!/usr/bin/env bash
# Fetch Debian's own kernels for the VM test matrix, and the tools to boot them (virtme-ng, QEMU).
#
#   tests/kernels/fetch.sh [SERIES...]        SERIES: 5.10 (bullseye), 6.1 (bookworm), 6.12 (trixie); default: all
#
# For each series it prints one line on stdout:  SERIES KERNEL_RELEASE ROOT
# (ROOT is the extracted package: ROOT/boot/vmlinuz-KERNEL_RELEASE, ROOT/lib/modules/KERNEL_RELEASE).
# Everything is cached under ${WAITMETER_CACHE:-$HOME/.cache/waitmeter}/kernels/ and a kernel that has
# been fetched completely (marker file) is never fetched again: reruns do no network work.
# The machine's apt sources are not touched: a private sources list (same mirror as the machine's own
# sources, signatures checked with debian-archive-keyring) and private lists/cache dirs are used.
# See README.md beside this file.
set -euo pipefail

VNG_VERSION=${WAITMETER_VNG_VERSION:-1.42}
CACHE=${WAITMETER_CACHE:-$HOME/.cache/waitmeter}/kernels
KEYRING=${WAITMETER_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
# Debian packages the VMs need: QEMU, the static busybox virtme-ng puts in its initramfs, and the tools
# it runs on the host (file/strings to read a kernel's version, depmod, the keyring for the signatures)
HOST_PKGS=(qemu-system-x86 busybox-static file binutils kmod debian-archive-keyring python3-venv)

log() { printf 'fetch.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

suite_of() {
    case "$1" in
        5.10) echo bullseye ;;
        6.1) echo bookworm ;;
        6.12) echo trixie ;;
        *) return 1 ;;
    esac
}

# apt-get install the packages of "$@" that are not installed yet (apt-get update only then)
ensure_debs() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    # another apt-get may be running on the machine: wait for its lock rather than fail
    apt-get -o DPkg::Lock::Timeout=900 update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
        --no-install-recommends "${missing[@]}" >&2
}

# virtme-ng, pinned, in its own venv under the cache (not the repo's .venv)
ensure_vng() {
    local venv=$CACHE/venv marker=$CACHE/venv/.virtme-ng-$VNG_VERSION py
    [ -f "$marker" ] && [ -x "$venv/bin/vng" ] && return 0
    log "installing virtme-ng $VNG_VERSION into $venv"
    rm -rf "$venv"
    # Debian's own python3 first (python3-venv is installed above), else whatever python3 is on PATH
    for py in /usr/bin/python3 python3; do
        if "$py" -m venv "$venv" >/dev/null 2>&1; then break; fi
        rm -rf "$venv"
    done
    [ -x "$venv/bin/python" ] || die "cannot create a Python venv in $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "virtme-ng==$VNG_VERSION" >&2
    "$venv/bin/vng" --version >/dev/null
    touch "$marker"
}

# The machine's Debian mirror base URL (the URI of the source that carries the machine's own release
# suite), read from its apt sources (one-line .list and deb822 .sources); WAITMETER_DEBIAN_MIRROR overrides.
mirror_base() {
    if [ -n "${WAITMETER_DEBIAN_MIRROR:-}" ]; then
        echo "${WAITMETER_DEBIAN_MIRROR%/}"
        return
    fi
    local codename files=() f uri
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] || die "no apt sources found in /etc/apt"
    for f in "${files[@]}"; do
        uri=$(awk -v want="$codename" -v deb822="$([[ $f == *.sources ]] && echo 1 || echo 0)" '
            function take(u) { sub(/\/+$/, "", u); print u; found = 1; exit }
            # deb822 stanza: judged at each blank line and at the end of the file
            function judge(   n, s, k, us) {
                if (types !~ /(^|[ \t])deb([ \t]|$)/ || tolower(enabled) == "no") return
                n = split(suites, s, /[ \t]+/)
                for (k = 1; k <= n; k++) if (s[k] == want) { split(uris, us, /[ \t]+/); take(us[1]) }
            }
            function reset() { types = ""; uris = ""; suites = ""; enabled = "yes" }
            BEGIN { reset() }
            /^[ \t]*#/ { next }
            !deb822 {
                if ($1 != "deb") next
                i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == want) take($i)
                next
            }
            /^[ \t]*$/ { judge(); reset(); next }
            /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
            /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
            /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
            /^Enabled:/ { sub(/^Enabled:[ \t]*/, ""); enabled = $0 }
            END { if (!found && deb822) judge() }
        ' "$f")
        if [ -n "$uri" ]; then
            echo "$uri"
            return
        fi
    done
    die "no Debian source for suite '$codename' in the machine's apt sources (set WAITMETER_DEBIAN_MIRROR)"
}

# private apt: its own sources list, lists, caches and status; the machine's apt.conf.d still applies
# (a proxy set there keeps working) but the machine's sources, preferences and lists are not used
APT_DIR=$CACHE/apt
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o Dir::Etc::Preferences=/dev/null
    -o Dir::Etc::PreferencesParts=/dev/null
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "Dir::State::status=$APT_DIR/status"
    -o "Dir::Cache=$APT_DIR/cache"
    -o APT::Architecture=amd64
    -o APT::Architectures::=amd64
    -o Acquire::Languages=none
    -o APT::Sandbox::User=root
    # appstream metadata (enabled machine-wide by 50appstream) is of no use here
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-large::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-large-hidpi::DefaultEnabled=false
)
papt() { apt-get "${APT_OPTS[@]}" "$@"; }
papt_cache() { apt-cache "${APT_OPTS[@]}" "$@"; }

# private apt update for the suites of the series in "$@"
apt_update() {
    local mirror s
    mirror=$(mirror_base)
    [ -r "$KEYRING" ] || die "$KEYRING missing (package debian-archive-keyring)"
    mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
    : >"$APT_DIR/status"
    {
        for s in "$@"; do
            printf 'deb [signed-by=%s] %s %s main\n' "$KEYRING" "$mirror" "$(suite_of "$s")"
        done
    } >"$APT_DIR/sources.list"
    log "apt update (private lists) from $mirror: $(awk '{print $4}' "$APT_DIR/sources.list" | tr '\n' ' ')"
    papt update -qq --error-on=any >&2 || die "private apt-get update failed (see above)"
}

# newest linux-image-SERIES*-amd64-unsigned: prints "PACKAGE VERSION"
newest_image() {
    local series=$1 re best="" bestv="" p v
    re="^linux-image-${series//./\\.}(\\.[0-9]+)?(-[0-9]+|\\+deb[0-9]+)-amd64-unsigned\$"
    while read -r p _; do
        v=$(papt_cache show --no-all-versions "$p" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
        [ -n "$v" ] || continue
        if [ -z "$bestv" ] || dpkg --compare-versions "$v" gt "$bestv"; then best=$p bestv=$v; fi
    done < <(papt_cache search --names-only "$re")
    [ -n "$best" ] || return 1
    echo "$best $bestv"
}

# download, extract and depmod one series
fetch_series() {
    local series=$1 dir=$CACHE/$1 pkg ver kver deb sha tmp
    read -r pkg ver < <(newest_image "$series") || die "no linux-image-$series*-amd64-unsigned in $(suite_of "$series")"
    kver=${pkg#linux-image-}
    kver=${kver%-unsigned}
    mkdir -p "$CACHE/debs"
    deb=$CACHE/debs/${pkg}_${ver//:/%3a}_amd64.deb
    # the SHA-256 of the signed index: a .deb left by an interrupted run is fetched again
    sha=$(papt_cache show "$pkg=$ver" | awk '/^SHA256:/ {print $2; exit}')
    if [ ! -f "$deb" ] || [ "$(sha256sum <"$deb" | cut -d' ' -f1)" != "$sha" ]; then
        rm -f "$deb"
        log "downloading $pkg $ver"
        (cd "$CACHE/debs" && papt download -qq "$pkg=$ver" >&2) || die "download of $pkg=$ver failed"
        [ -f "$deb" ] || die "downloaded $pkg but $deb is not there"
    fi
    log "extracting $(basename "$deb")"
    tmp=$dir/root.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp"
    dpkg-deb -x "$deb" "$tmp"
    # merged-/usr packages (trixie) keep the modules in usr/lib: virtme-ng and depmod look in lib/
    if [ ! -e "$tmp/lib" ] && [ -d "$tmp/usr/lib/modules" ]; then ln -s usr/lib "$tmp/lib"; fi
    [ -f "$tmp/boot/vmlinuz-$kver" ] || die "$deb has no boot/vmlinuz-$kver"
    [ -d "$tmp/lib/modules/$kver" ] || die "$deb has no lib/modules/$kver"
    depmod -a -b "$tmp" "$kver"
    rm -rf "$dir/root"
    mv "$tmp" "$dir/root"
    # the marker, last and atomically
    printf 'series=%s\nsuite=%s\npackage=%s\nversion=%s\nkernel=%s\ndeb=%s\nsha256=%s\n' \
        "$series" "$(suite_of "$series")" "$pkg" "$ver" "$kver" "$(basename "$deb")" "$sha" >"$dir/complete.tmp"
    mv "$dir/complete.tmp" "$dir/complete"
}

main() {
    local series=("$@") s todo=()
    [ ${#series[@]} -gt 0 ] || series=(5.10 6.1 6.12)
    for s in "${series[@]}"; do
        suite_of "$s" >/dev/null || die "unknown series '$s' (known: 5.10 6.1 6.12)"
    done
    mkdir -p "$CACHE"
    # one fetch at a time per cache (parallel CI jobs, a developer's shell)
    exec 9>"$CACHE/.lock"
    flock 9

    ensure_debs "${HOST_PKGS[@]}"
    ensure_vng

    for s in "${series[@]}"; do
        [ -f "$CACHE/$s/complete" ] && [ -d "$CACHE/$s/root" ] || todo+=("$s")
    done
    if [ ${#todo[@]} -gt 0 ]; then
        apt_update "${todo[@]}"
        for s in "${todo[@]}"; do fetch_series "$s"; done
    fi
    for s in "${series[@]}"; do
        printf '%s %s %s\n' "$s" "$(sed -n 's/^kernel=//p' "$CACHE/$s/complete")" "$CACHE/$s/root"
    done
}

main "$@"
