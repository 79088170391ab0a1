"""Record real line tables, with the interpreter's own answer for every
instruction, for the tests of `line_for` (agent/formats/src/pyframe.rs):

    python3.X tests/helpers/record_linetables.py [OUT_DIR]

writes OUT_DIR/3.X.json (default agent/formats/testdata/linetables/). The
source compiled is fixed (below): loops, a multi-line call, a blank line, a
comprehension, a lambda, a generator, try/except and with (instructions
without a line on 3.10+), a jump of 300 lines (line deltas beyond one byte), a
line of more than 255 bytes of bytecode and columns beyond 255 (the long
forms). For every code object in it: minor, co_firstlineno, the raw line
table (co_lnotab on 3.8-3.9, co_linetable on 3.10+) as hex, and the
(byte offset, line) of every instruction (every 2 bytes), from co_lines()
on 3.10+ and dis.findlinestarts() on 3.8-3.9; null where it gives no line.
Runs on 3.8 and later.
"""
import dis
import json
import os
import sys

LONG = " + ".join("v%d" % (i % 7) for i in range(120))
SOURCE = '''\
import contextlib


def measured(n, items):
    total = 0
    for i in range(n):
        if i % 2:
            total += i

        else:
            total -= 1
    squares = [x * x for x in items if x]
    key = sorted(
        items,
        key=lambda x: -x,
        reverse=True,
    )
    while total > 100:
        total //= 2
    try:
        total += int("12")
    except ValueError:
        total = 0
    finally:
        total += 1
    with contextlib.suppress(KeyError):
        total += {}.get("x", 0)
    gen = (s + 1 for s in squares)
''' + "\n" * 300 + '''\
    v0 = v1 = v2 = v3 = v4 = v5 = v6 = total
    far = %s
    return total + sum(gen) + len(key) + far
''' % LONG


def codes(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            for x in codes(c):
                yield x


def pairs(code):
    n = len(code.co_code)
    line_of = [None] * (n // 2)
    if sys.version_info >= (3, 10):
        for start, end, line in code.co_lines():
            for off in range(start, min(end, n), 2):
                line_of[off // 2] = line
    else:
        starts = list(dis.findlinestarts(code))
        for i, (start, line) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else n
            for off in range(start, end, 2):
                line_of[off // 2] = line
    return [[2 * i, line] for i, line in enumerate(line_of)]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "agent", "formats", "testdata", "linetables")
    minor = sys.version_info[1]
    module = compile(SOURCE, "linetables.py", "exec")
    entries = []
    for c in codes(module):
        if c is module:
            continue
        table = c.co_linetable if minor >= 10 else c.co_lnotab
        entries.append({
            "name": getattr(c, "co_qualname", c.co_name),
            "firstlineno": c.co_firstlineno,
            "linetable": table.hex(),
            "pairs": pairs(c),
        })
    doc = {"version": sys.version.split()[0], "minor": minor, "code": entries}
    path = os.path.normpath(os.path.join(out_dir, "3.%d.json" % minor))
    os.makedirs(out_dir, exist_ok=True)
    with open(path, "w") as f:
        # one code object per line, its pairs on it: small diffs when re-recorded
        f.write('{"version": %s, "minor": %d, "code": [\n' % (json.dumps(doc["version"]), minor))
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in entries))
        f.write("\n]}\n")
    json.load(open(path))  # what was written parses
    print(path, doc["version"], len(entries), "code objects", sum(len(e["pairs"]) for e in entries), "instructions")


main()
