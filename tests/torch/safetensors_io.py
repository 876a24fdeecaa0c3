"""safetensors files with PyTorch alone, as the safetensors library reads and
writes them: an 8-byte little-endian header length, a JSON header (each
tensor's dtype, shape and byte offsets; "__metadata__"), then the bytes.
Shared by the checks in tests/torch/."""
import json
import struct

import torch

TORCH_DTYPES = {"F32": torch.float32, "I32": torch.int32, "BF16": torch.bfloat16, "F16": torch.float16}
NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def load(path):
    """A safetensors file as {name: tensor}, each in its header's dtype."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=TORCH_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def save(path, tensors, metadata=None):
    """{name: tensor} as a safetensors file, in the order given."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        b = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = metadata or {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
