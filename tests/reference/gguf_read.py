"""Minimal GGUF reader for the numpy reference (versions 1, 2, 3).

Layout (little-endian):
    magic "GGUF" | u32 version | n_tensors | n_kv | kv pairs | tensor infos | pad | data
Counts, string lengths, array counts and tensor dims are u32 in v1 and u64 in
v2/v3. The data section starts at the next multiple of general.alignment
(default 32) after the tensor infos; tensor offsets are relative to it.

read_gguf(path) -> (metadata: dict[str, value], tensors: dict[name, (type_id, ne, raw bytes)])
ne is ggml order: ne[0] is the row length (innermost).
"""

import struct

import numpy as np

from dequant import row_bytes

# GGUF metadata value types -> struct format (scalars only).
_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
               7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_TYPE_STRING = 8
_TYPE_ARRAY = 9


class _Cursor:
    def __init__(self, buf, version):
        self.buf = buf
        self.pos = 0
        self.count_fmt = "<I" if version == 1 else "<Q"  # v1: 32-bit counts

    def unpack(self, fmt):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def count(self):
        return self.unpack(self.count_fmt)

    def string(self):
        n = self.count()
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == _TYPE_STRING:
            return self.string()
        if vtype == _TYPE_ARRAY:
            elem_type = self.unpack("<I")
            n = self.count()
            return [self.value(elem_type) for _ in range(n)]
        if vtype not in _SCALAR_FMT:
            raise ValueError(f"unknown GGUF metadata type {vtype} at byte {self.pos}")
        return self.unpack(_SCALAR_FMT[vtype])


def read_gguf(path):
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    if bytes(buf[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file (bad magic)")
    (version,) = struct.unpack_from("<I", buf, 4)
    if version not in (1, 2, 3):
        raise ValueError(f"{path}: GGUF version {version} not supported (1, 2, 3)")
    cur = _Cursor(buf, version)
    cur.pos = 8
    n_tensors = cur.count()
    n_kv = cur.count()

    meta = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.unpack("<I")
        meta[key] = cur.value(vtype)

    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        ne = [cur.count() for _ in range(n_dims)]
        type_id = cur.unpack("<I")
        offset = cur.unpack("<Q")
        infos.append((name, type_id, ne, offset))

    alignment = int(meta.get("general.alignment", 32))
    data_start = (cur.pos + alignment - 1) // alignment * alignment

    tensors = {}
    for name, type_id, ne, offset in infos:
        n_rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
        n_bytes = row_bytes(type_id, ne[0]) * n_rows
        begin = data_start + offset
        if begin + n_bytes > len(buf):
            raise ValueError(f"{path}: tensor '{name}' runs past end of file")
        tensors[name] = (type_id, ne, bytes(buf[begin:begin + n_bytes]))
    return meta, tensors
