"""Measure, for the running CPython, what agent/formats/src/pyframe.rs needs to
walk a thread's Python stack from outside, and prove the numbers on a live
process:

    python3.X tests/helpers/measure_frames.py

1. The offsets come from the interpreter's own headers: a small C program
   (`offsetof`, `sizeof`) is compiled with gcc against
   sysconfig's include directory, internal headers included (Py_BUILD_CORE).
2. They are then used the way the agent uses them: a child process of the same
   interpreter runs a thread blocked inside `inner_known_function`; from
   /proc/CHILD/mem this script walks interpreter -> thread states -> the
   thread's frames -> code objects, and checks every frame against what the
   child says of its own stack (sys._current_frames): the code object's type is
   PyCode_Type, its co_name, co_qualname, co_filename, co_firstlineno and line
   table bytes are the ones this interpreter compiles from the same file, the
   instruction read gives the frame's f_lasti, and that index gives the
   frame's f_lineno. Frames the agent must skip (C-stack and interpreter entry
   frames, by their `owner`) are counted and printed.

Prints one line of `key=value` pairs (the numbers pyframe.rs carries), then
`walk=ok ...`; exits non-zero on any disagreement. Needs gcc and root (or
ptrace rights over the child). Runs on 3.8 and later.
"""
import json
import os
import subprocess
import sys
import sysconfig
import tempfile

PROBE = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "frameobject.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX >= 0x03090000
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_pystate.h"
#endif
#define P(name, expr) printf("%s=%zu\n", name, (size_t)(expr))
int main(void) {
#if PY_VERSION_HEX >= 0x030B0000
    P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
#else
    P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
    P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#endif
#if PY_VERSION_HEX >= 0x030D0000
    P("tstate_frame", offsetof(PyThreadState, current_frame));
#elif PY_VERSION_HEX >= 0x030B0000
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
#else
    P("tstate_frame", offsetof(PyThreadState, frame));
#endif
#if PY_VERSION_HEX >= 0x030B0000
    P("frame_size", sizeof(_PyInterpreterFrame));
    P("previous", offsetof(_PyInterpreterFrame, previous));
#  if PY_VERSION_HEX >= 0x030D0000
    P("code", offsetof(_PyInterpreterFrame, f_executable));
    P("instr", offsetof(_PyInterpreterFrame, instr_ptr));
#  else
    P("code", offsetof(_PyInterpreterFrame, f_code));
    P("instr", offsetof(_PyInterpreterFrame, prev_instr));
#  endif
    P("owner", offsetof(_PyInterpreterFrame, owner));
#  if PY_VERSION_HEX >= 0x030E0000 && defined(Py_GIL_DISABLED)
    P("tlbc_index", offsetof(_PyInterpreterFrame, tlbc_index));
    P("co_tlbc", offsetof(PyCodeObject, co_tlbc));
#  endif
#else
    P("previous", offsetof(PyFrameObject, f_back));
    P("code", offsetof(PyFrameObject, f_code));
    P("instr", offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030F0000
    P("owned_by_cstack", FRAME_OWNED_BY_CSTACK);
#endif
#if PY_VERSION_HEX >= 0x030E0000
    P("owned_by_interpreter", FRAME_OWNED_BY_INTERPRETER);
#endif
    P("co_filename", offsetof(PyCodeObject, co_filename));
    P("co_name", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX >= 0x030B0000
    P("co_qualname", offsetof(PyCodeObject, co_qualname));
    P("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#endif
    P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030A0000
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
#else
    P("co_linetable", offsetof(PyCodeObject, co_lnotab));
#endif
    P("ob_type", offsetof(PyObject, ob_type));
    P("var_ob_size", offsetof(PyVarObject, ob_size));
    P("bytes_ob_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_ob_sval", offsetof(PyBytesObject, ob_sval));
    P("str_length", offsetof(PyASCIIObject, length));
    P("str_state", offsetof(PyASCIIObject, state));
    P("str_ascii_data", sizeof(PyASCIIObject));
    P("str_compact_data", sizeof(PyCompactUnicodeObject));
    return 0;
}
"""

# The child: a thread blocked in a known function (in read(2), called from it);
# once the thread sleeps there, the child reports its own view of that
# thread's stack, then waits for a line on stdin to let it go.
WORKLOAD = '''\
import ctypes, json, os, sys, threading, time, types
r, w = os.pipe()


def inner_known_function(fd):
    n = 1

    return os.read(fd, n)


class Outer:
    def outer(self, fd):
        x = [i for i in range(3)]
        return inner_known_function(
            fd,
        ) + bytes(x)


def blocked_in_read(tid):
    # the thread sleeps in read(2) (x86-64 syscall 0), not on its way there
    try:
        with open("/proc/self/task/%d/syscall" % tid) as f:
            return f.read().split()[0] == "0"
    except OSError:
        return False


t = threading.Thread(target=Outer().outer, args=(r,), name="measured")
t.start()
deadline = time.monotonic() + 10
while not (t.native_id and blocked_in_read(t.native_id)):
    assert time.monotonic() < deadline, "the thread never blocked in read"
    time.sleep(0.001)
frames = []
f = sys._current_frames()[t.ident]
while f is not None:
    frames.append([f.f_code.co_name, f.f_code.co_filename, f.f_lineno, f.f_lasti])
    f = f.f_back
main = ctypes.pythonapi.PyInterpreterState_Main
main.restype = ctypes.c_void_p
print(json.dumps({
    "ident": t.ident,
    "native_id": t.native_id,
    "interp": main(),
    "code_type": id(types.CodeType),
    "frames": frames,
}), flush=True)
sys.stdin.readline()
os.write(w, b"x")
t.join()
'''


def offsets_from_headers(tmp):
    inc = sysconfig.get_paths()["include"]
    src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
    with open(src, "w") as f:
        f.write(PROBE)
    subprocess.run(["gcc", "-I" + inc, "-I" + os.path.join(inc, "internal"), src, "-o", exe], check=True)
    out = subprocess.run([exe], check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    return {k: int(v) for k, v in (line.split("=") for line in out.split())}


class Mem:
    def __init__(self, pid):
        self.fd = os.open("/proc/%d/mem" % pid, os.O_RDONLY)

    def read(self, addr, n):
        b = os.pread(self.fd, n, addr)
        if len(b) != n:
            raise OSError("short read at %#x" % addr)
        return b

    def u(self, addr, n=8, signed=False):
        return int.from_bytes(self.read(addr, n), "little", signed=signed)


def read_str(mem, o, addr, free_threaded):
    # the state bits: interned (2 bits; a whole byte on free-threaded builds), kind:3, compact:1, ascii:1
    shift = 8 if free_threaded else 2
    state = mem.u(addr + o["str_state"], 4)
    kind, compact, ascii_ = (state >> shift) & 7, (state >> (shift + 3)) & 1, (state >> (shift + 4)) & 1
    length = mem.u(addr + o["str_length"], 8, True)
    if not (compact and kind == 1 and 0 <= length < 4096):
        raise ValueError("not a compact 1-byte str at %#x (state %#x)" % (addr, state))
    data = addr + (o["str_ascii_data"] if ascii_ else o["str_compact_data"])
    return mem.read(data, length).decode("latin-1")


def read_bytes(mem, o, addr):
    n = mem.u(addr + o["bytes_ob_size"], 8, True)
    if not 0 <= n < 1 << 20:
        raise ValueError("implausible bytes size %d at %#x" % (n, addr))
    return mem.read(addr + o["bytes_ob_sval"], n)


def line_of(code, offset_bytes):
    """The interpreter's own answer: the line of the instruction at this byte offset."""
    if sys.version_info >= (3, 10):
        for start, end, line in code.co_lines():
            if start <= offset_bytes < end:
                return line
        return None
    import dis

    line = None
    for start, ln in dis.findlinestarts(code):
        if start > offset_bytes:
            break
        line = ln
    return line


def codes_in(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            for x in codes_in(c):
                yield x


def main():
    minor = sys.version_info[1]
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    with tempfile.TemporaryDirectory() as tmp:
        o = offsets_from_headers(tmp)
        path = os.path.join(tmp, "workload.py")
        with open(path, "w") as f:
            f.write(WORKLOAD)
        with open(path) as f:
            mine = {c.co_name: c for c in codes_in(compile(f.read(), path, "exec"))}
        child = subprocess.Popen([sys.executable, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
        try:
            info = json.loads(child.stdout.readline())
            walked, skipped = walk(Mem(child.pid), o, info, minor, free_threaded)
        finally:
            child.stdin.write("\n")
            child.stdin.close()
            child.wait(timeout=10)
    expected = info["frames"]
    names = [w["name"] for w in walked]
    if names != [e[0] for e in expected]:
        sys.exit("walk: frames %s, the child says %s" % (names, [e[0] for e in expected]))
    if "inner_known_function" not in names:
        sys.exit("walk: inner_known_function not found: %s" % names)
    for w, (name, filename, lineno, lasti) in zip(walked, expected):
        if w["filename"] != filename:
            sys.exit("%s: co_filename %r, expected %r" % (name, w["filename"], filename))
        if w["lasti_bytes"] != lasti:
            sys.exit("%s: the instruction read gives f_lasti %s, the frame says %s" % (name, w["lasti_bytes"], lasti))
        code = mine.get(name) if filename == path else None
        if code is None:
            continue
        table = code.co_linetable if minor >= 10 else code.co_lnotab
        got = (w["firstlineno"], w["linetable"], w.get("qualname", name))
        want = (code.co_firstlineno, table, getattr(code, "co_qualname", name))
        if got != want:
            sys.exit("%s: read %r, compiled %r" % (name, got, want))
        line = line_of(code, lasti)
        if line != lineno:
            sys.exit("%s: f_lasti %d is line %s by the line table, the frame says %s" % (name, lasti, line, lineno))
    o["minor"], o["free_threaded"] = minor, int(free_threaded)
    print(" ".join("%s=%s" % kv for kv in sorted(o.items())))
    print("walk=ok version=%s frames=%s skipped_owners=%s tlbc_frames=%d"
          % (sys.version.split()[0], "<".join(names), skipped, sum(w["tlbc"] for w in walked)))


def walk(mem, o, info, minor, free_threaded):
    """interp -> thread states -> the measured thread's frames, as the agent walks them."""
    tstate = mem.u(info["interp"] + o["interp_threads_head"])
    for _ in range(1000):
        if tstate == 0:
            raise SystemExit("walk: no thread state with thread_id %#x" % info["ident"])
        if mem.u(tstate + o["tstate_thread_id"]) == info["ident"]:
            break
        tstate = mem.u(tstate + o["tstate_next"])
    if "tstate_native_thread_id" in o and mem.u(tstate + o["tstate_native_thread_id"]) != info["native_id"]:
        raise SystemExit("walk: native_thread_id disagrees")
    frame = mem.u(tstate + o["tstate_frame"])
    if "cframe_current_frame" in o:
        frame = mem.u(frame + o["cframe_current_frame"])
    # f_executable is a _PyStackRef on 3.14+: clear its tag bits
    mask = 3 if minor >= 14 else 0
    skip_from = o.get("owned_by_interpreter", o.get("owned_by_cstack"))
    walked, skipped = [], []
    for _ in range(256):
        if frame == 0:
            break
        owner = mem.u(frame + o["owner"], 1) if "owner" in o else None
        raw_code = mem.u(frame + o["code"])
        code = raw_code & ~mask
        is_code = code != 0 and mem.u(code + o["ob_type"]) == info["code_type"]
        if skip_from is not None and owner >= skip_from:
            skipped.append(owner)
            frame = mem.u(frame + o["previous"])
            continue
        if not is_code:
            raise SystemExit("walk: frame %#x (owner %s) holds %#x, not a code object" % (frame, owner, raw_code))
        w = {
            "name": read_str(mem, o, mem.u(code + o["co_name"]), free_threaded),
            "filename": read_str(mem, o, mem.u(code + o["co_filename"]), free_threaded),
            "firstlineno": mem.u(code + o["co_firstlineno"], 4, True),
            "linetable": read_bytes(mem, o, mem.u(code + o["co_linetable"])),
            "tlbc": 0,
        }
        if "co_qualname" in o:
            w["qualname"] = read_str(mem, o, mem.u(code + o["co_qualname"]), free_threaded)
        if minor <= 10:
            lasti = mem.u(frame + o["instr"], 4, True)
            w["lasti_bytes"] = lasti * 2 if minor == 10 and lasti >= 0 else lasti
        else:
            ptr = mem.u(frame + o["instr"])
            base = code + o["co_code_adaptive"]
            units = mem.u(code + o["var_ob_size"], 8, True)
            if not base <= ptr < base + 2 * units and "co_tlbc" in o:
                # a free-threaded build's thread-local copy of the bytecode: the entry of co_tlbc holding ptr
                tlbc = mem.u(code + o["co_tlbc"])
                n = mem.u(tlbc, 8, True)
                for i in range(min(n, 1024)):
                    entry = mem.u(tlbc + 8 + 8 * i)
                    if entry <= ptr < entry + 2 * units:
                        if i != mem.u(frame + o["tlbc_index"], 4, True):
                            raise SystemExit("walk: tlbc entry %d holds instr_ptr, the frame says index %d" % (i, mem.u(frame + o["tlbc_index"], 4, True)))
                        base, w["tlbc"] = entry, 1
                        break
            w["lasti_bytes"] = ptr - base
        walked.append(w)
        frame = mem.u(frame + o["previous"])
    return walked, skipped


main()
