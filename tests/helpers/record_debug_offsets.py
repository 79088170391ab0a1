"""Record the start of `_PyRuntime` (its `_Py_DebugOffsets`) of the running
interpreter, for the unit tests of agent/formats/src/debug_offsets.rs.

    python3.X tests/helpers/record_debug_offsets.py OUT.bin
"""
import ctypes
import sys

READ_LEN = 8 + 8 * 93  # debug_offsets::READ_LEN (3.15: through unicode_object)

runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
data = ctypes.string_at(runtime, READ_LEN)
assert data[:8] == b"xdebugpy", data[:8]
with open(sys.argv[1], "wb") as f:
    f.write(data)
print(sys.argv[1], sys.version.split()[0], len(data), "bytes")
