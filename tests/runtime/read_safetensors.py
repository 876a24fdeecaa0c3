#!/usr/bin/env python3
"""Reads a Rill checkpoint's model.safetensors with numpy alone, parsing the
header by hand (F32, I32, F16, and BF16 as the high half of a float32), and
prints one line per tensor:
    tensor <name> <dtype> <shape as [d0,d1,...]> <values, space-separated, repr>
and one line per metadata entry:
    metadata <key> <value>
checkpoint_test.cc compares this output with what it wrote, which shows the
format is readable without Rill."""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, dtype={"F32": "<f4", "I32": "<i4", "F16": "<f2"}[dtype])
        tensors[name] = (dtype, values.reshape(info["shape"]))
    return tensors, metadata


def main():
    tensors, metadata = load(sys.argv[1])
    for name, (dtype, array) in tensors.items():
        shape = "[" + ",".join(str(d) for d in array.shape) + "]"
        values = " ".join(repr(int(v) if dtype == "I32" else float(v)) for v in array.reshape(-1))
        print(f"tensor {name} {dtype} {shape} {values}".rstrip())
    for key, value in metadata.items():
        print(f"metadata {key} {value}")


if __name__ == "__main__":
    main()
