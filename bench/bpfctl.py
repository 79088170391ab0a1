"""The system's libbpf (libbpf1, 1.x) through ctypes, for the bench's small loaders
(floor/floor.py, primitives/primitives.py): the calls they make, typed."""
import ctypes
import ctypes.util
import os
import sys

lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
P = ctypes.c_void_p
for fn, res, args in [("bpf_object__open_file", P, [ctypes.c_char_p, P]), ("bpf_object__load", ctypes.c_int, [P]),
                      ("bpf_object__next_program", P, [P, P]), ("bpf_program__name", ctypes.c_char_p, [P]),
                      ("bpf_object__next_map", P, [P, P]), ("bpf_map__name", ctypes.c_char_p, [P]),
                      ("bpf_map__initial_value", P, [P, ctypes.POINTER(ctypes.c_size_t)]),
                      ("bpf_object__find_map_by_name", P, [P, ctypes.c_char_p]),
                      ("bpf_map__update_elem", ctypes.c_int, [P, P, ctypes.c_size_t, P, ctypes.c_size_t, ctypes.c_uint64]),
                      ("bpf_map__value_size", ctypes.c_uint32, [P]),
                      ("bpf_program__attach", P, [P]), ("bpf_link__destroy", ctypes.c_int, [P]),
                      ("bpf_object__close", None, [P])]:
    getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args


def fail(who, what):
    """Exit with `who: what: the errno's reason`."""
    err = ctypes.get_errno()
    sys.exit(f"{who}: {what}: {os.strerror(err) if err else 'failed'}")


def programs(obj):
    """{name: program} of a loaded object, in its order."""
    out, prog = {}, lib.bpf_object__next_program(obj, None)
    while prog:
        out[lib.bpf_program__name(prog).decode()] = prog
        prog = lib.bpf_object__next_program(obj, prog)
    return out
