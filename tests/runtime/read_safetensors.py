#!/usr/bin/env python3
"""Reads a Rill checkpoint's model.safetensors with numpy alone, parsing the
header by hand, and prints one line per tensor:
    tensor <name> <shape as [d0,d1,...]> <values, space-separated, repr of float>
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
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return tensors, metadata


def main():
    tensors, metadata = load(sys.argv[1])
    for name, array in tensors.items():
        shape = "[" + ",".join(str(d) for d in array.shape) + "]"
        values = " ".join(repr(float(v)) for v in array.reshape(-1))
        print(f"tensor {name} {shape} {values}".rstrip())
    for key, value in metadata.items():
        print(f"metadata {key} {value}")


if __name__ == "__main__":
    main()
