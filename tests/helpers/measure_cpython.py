"""Measure, from inside a running CPython, the struct offsets that
agent/src/python/layout.rs needs to read thread names from outside:

  python3.X tests/helpers/measure_cpython.py

Prints one line of `key=value` pairs. Run it under every supported
interpreter when adding a version; the table is data, this is its source.
"""
import ctypes
import os
import sys
import threading

P = ctypes.sizeof(ctypes.c_void_p)
MEM = os.open("/proc/self/mem", os.O_RDONLY)


def safe_read(addr, n):
    try:
        return os.pread(MEM, n, addr)
    except (OSError, OverflowError):
        return b""


def u64(addr):
    return ctypes.c_uint64.from_address(addr).value


def find_ptr(base, target, limit):
    for off in range(0, limit, P):
        if u64(base + off) == target:
            return off
    return None


def main():
    out = {"version": "%d.%d.%d" % sys.version_info[:3]}
    get_ts = ctypes.pythonapi.PyThreadState_Get
    get_ts.restype = ctypes.c_void_p
    tstate = get_ts()
    interp = u64(tstate + 2 * P)  # PyThreadState.interp
    out["tstate_interp"] = 2 * P
    out["interp_modules"] = find_ptr(interp, id(sys.modules), 0x4000)
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    out["runtime_interp_head"] = find_ptr(runtime, interp, 0x1000)
    out["type_dictoffset"] = 36 * P  # PyTypeObject.tp_dictoffset
    out["type_flags"] = 21 * P  # PyTypeObject.tp_flags
    t = threading.current_thread()
    ty = type(t)
    out["thread_dictoffset"] = ctypes.c_ssize_t.from_address(id(ty) + 36 * P).value
    out["thread_flags"] = hex(ctypes.c_ulong.from_address(id(ty) + 21 * P).value)
    out["thread_basicsize"] = ty.__basicsize__
    # ht_cached_keys: a pointer in the heap type to a keys object holding "_name"
    name_key = id("_name")
    for off in range(0x100, 0x600, P):
        p = u64(id(ty) + off)
        if p and p > 0x1000:
            blob = safe_read(p, 0x400)
            if name_key.to_bytes(8, "little") in blob:
                out["ht_cached_keys"] = off
                break
    print(" ".join("%s=%s" % kv for kv in out.items()))


main()
