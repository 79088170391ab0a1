#!/usr/bin/env bash
# Bounded fuzzing of waitmeter's parsers of hostile input (agent/formats):
#   agent/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
# Each target starts from its committed corpus (agent/fuzz/corpus/TARGET); the
# ELF target also from the real interpreters and libpython builds on this
# machine. New inputs go to a scratch directory, never into the repo; a crash
# leaves its input in agent/fuzz/artifacts/TARGET and fails the run.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(elf exposition http_head debug_offsets linetable perfmap demangle cfi hotspot gopclntab)
export PATH="$PWD/../../.tools/bin:$HOME/.cargo/bin:$PATH"
command -v cargo-fuzz >/dev/null || { echo "fuzz: cargo-fuzz is missing: run make setup"; exit 1; }
# cargo fuzz needs nightly for its -Z flags: rustup's nightly when there is one, else the stable
# compiler told to accept them (RUSTC_BOOTSTRAP, as rustc's own build does)
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then tc=(+nightly); else tc=(); export RUSTC_BOOTSTRAP=1; fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
    seeds=()
    [ -d "corpus/$t" ] && seeds+=("corpus/$t")
    if [ "$t" = elf ]; then
        mkdir -p "$scratch/elf-seeds"
        # real interpreters: pyenv builds (executables and libpython), Debian's static stripped python3
        for f in "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/*/bin/python3.* \
                 "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/*/lib/libpython3*.so.1.0 \
                 /usr/bin/python3.*; do
            [ -f "$f" ] && ! [ -L "$f" ] && [ "$(head -c 4 "$f")" = $'\x7fELF' ] || continue
            cp "$f" "$scratch/elf-seeds/$(echo "$f" | tr / _)"
        done
        seeds+=("$scratch/elf-seeds")
        echo "fuzz: elf seeds: $(ls "$scratch/elf-seeds" | wc -l) real interpreter files"
    fi
    # a real Go executable's function table (the toolchain's own), after its code's address
    if [ "$t" = gopclntab ]; then
        mkdir -p "$scratch/gopclntab-seeds"
        go=$(command -v go || echo /usr/local/go/bin/go)
        text=$(readelf -SW "$go" | awk '{ for (i = 1; i < NF; i++) if ($i == ".text") print $(i + 2) }')
        python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<Q", int(sys.argv[1], 16)))' "$text" >"$scratch/gopclntab-seeds/go"
        objcopy -O binary --only-section=.gopclntab "$go" "$scratch/gopclntab.bin"
        cat "$scratch/gopclntab.bin" >>"$scratch/gopclntab-seeds/go"
        seeds+=("$scratch/gopclntab-seeds")
    fi
    # the debug-offset tables recorded from real interpreters
    [ "$t" = debug_offsets ] && seeds+=("../formats/testdata/debug_offsets")
    # the line tables recorded from real interpreters, as the target reads its input:
    # firstlineno and an instruction (4 bytes LE each), then the table
    if [ "$t" = linetable ]; then
        mkdir -p "$scratch/linetable-seeds"
        python3 - "$scratch/linetable-seeds" ../formats/testdata/linetables/*.json <<'PY'
import json, struct, sys
for path in sys.argv[2:]:
    doc = json.load(open(path))
    for n, code in enumerate(doc["code"]):
        last = code["pairs"][-1][0] if code["pairs"] else 0
        seed = struct.pack("<iI", code["firstlineno"], last // 2) + bytes.fromhex(code["linetable"])
        open("%s/%s-%d" % (sys.argv[1], doc["version"], n), "wb").write(seed)
PY
        seeds+=("$scratch/linetable-seeds")
    fi
    mkdir -p "$scratch/$t"
    echo "fuzz: $t for ${secs} s"
    # -max_len: the real interpreters are up to ~30 MB; libFuzzer mutates within it
    rc=0
    cargo "${tc[@]}" fuzz run "$t" "$scratch/$t" "${seeds[@]}" -- \
        -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 >"$scratch/$t.log" 2>&1 || rc=$?
    grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)' "$scratch/$t.log" || true
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$scratch/$t.log"
        echo "fuzz: $t FAILED (exit $rc; the input is in agent/fuzz/artifacts/$t)"
        exit 1
    fi
done
echo "fuzz: ${#targets[@]} target(s) ran ${secs} s each without a crash"
