"""The one safetensors reader/writer of uocr_dev (BF16/F32/F16), without the `safetensors` package.

Every model folder the tools write has uocr's layout: one BF16 shard (SHARD, tensors in sorted name
order, header padded with spaces to 8 bytes, {"__metadata__": {"format": "pt"}} first) and
model.safetensors.index.json. Writers: export, average (trained weights), make_random (random
weights, drawn one tensor at a time so that a 6.7 GB checkpoint never sits in memory) and
fixtures.make_reference (tiny-b, through make_random). Readers: infer, check_golden, average
(torch tensors, read()) and fixtures.make_reference (numpy arrays, read_numpy()).

Only numpy is needed at import: torch is imported by the functions that return or take torch
tensors (read, bf16_round).
"""
import json
import os
import struct

import numpy as np

SHARD = "model-00001-of-000001.safetensors"
_NUMPY_DTYPE = {"F32": np.float32, "F16": np.float16}


def read_numpy(path):
    """name -> float32 numpy array of every tensor in a safetensors file (BF16 widened exactly)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        shape = info["shape"]
        if info["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            out[name] = u.view(np.float32).reshape(shape).copy()
        else:
            out[name] = np.frombuffer(raw, dtype=_NUMPY_DTYPE[info["dtype"]]).reshape(shape).astype(np.float32)
    return out


def read(path):
    """name -> float32 torch tensor of every tensor in a safetensors file."""
    import torch
    return {name: torch.from_numpy(a) for name, a in read_numpy(path).items()}


def bf16_bits(a):
    """uint16 bf16 bit patterns of a float array (round to nearest, ties to even), same shape. Works in
    place on one float32 copy (5x faster than temporaries at the real model size)."""
    bits = np.asarray(a).astype(np.float32, copy=True).view(np.uint32)
    odd = bits >> 16
    odd &= 1
    bits += 0x7FFF
    bits += odd
    bits >>= 16
    return bits.astype("<u2")


def _float32(values):
    """A float32 numpy array of a numpy array or a torch tensor."""
    if hasattr(values, "detach"):  # torch
        return values.detach().float().contiguous().numpy()
    return np.asarray(values, dtype=np.float32)


def bf16_round(t):
    """float32 torch tensor rounded to the nearest bf16 value (ties to even), returned as float32."""
    import torch
    u = bf16_bits(_float32(t)).astype(np.uint32) << 16
    return torch.from_numpy(u.view(np.float32))


def _entries(tensors):
    """[(name, shape, values)] sorted by name, from a dict name -> array/tensor or such a list."""
    if isinstance(tensors, dict):
        tensors = [(name, list(t.shape), t) for name, t in tensors.items()]
    return sorted(tensors, key=lambda e: e[0])


def write_bf16(path, tensors):
    """Writes `tensors` as BF16 in sorted name order: a dict name -> float array or torch tensor, or a
    list of (name, shape, values) where values is an array or a function returning one (called when
    its turn to be written comes, in name order). Returns the data bytes."""
    entries = _entries(tensors)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in entries:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": [int(s) for s in shape], "data_offsets": [offset, offset + size]}
        offset += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name, shape, values in entries:
            blob = bf16_bits(_float32(values() if callable(values) else values)).tobytes()
            if len(blob) != 2 * int(np.prod(shape)):
                raise ValueError(f"{path}: {name} has {len(blob) // 2} values, its shape {list(shape)} needs "
                                 f"{int(np.prod(shape))}")
            f.write(blob)
    return offset


def write_model_weights(folder, tensors):
    """A model folder's weights: SHARD (BF16, see write_bf16) and model.safetensors.index.json.
    Returns the data bytes."""
    entries = _entries(tensors)
    total = write_bf16(os.path.join(folder, SHARD), entries)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {name: SHARD for name, _, _ in entries}}, f,
                  indent=2)
    return total
