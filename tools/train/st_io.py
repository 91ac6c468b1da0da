"""Minimal safetensors reader/writer (BF16/F32/F16), no dependency on the safetensors package."""
import json
import os
import struct

import numpy as np
import torch

_DT = {"BF16": (2, None), "F32": (4, np.float32), "F16": (2, np.float16)}


def read(path):
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
            t = torch.from_numpy(u.view(np.float32).reshape(shape).copy())
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=_DT[info["dtype"]][1]).reshape(shape).astype(np.float32))
        out[name] = t
    return out


def bf16_round(t):
    """float32 tensor rounded to the nearest bf16 value (ties to even), returned as float32."""
    bits = t.detach().float().contiguous().numpy().view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return torch.from_numpy(r.astype(np.uint32).view(np.float32).copy())


def write_bf16(path, tensors):
    """tensors: dict name -> float tensor; written as BF16 in sorted name order. Returns total bytes."""
    names = sorted(tensors)
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in names:
        a = tensors[name].detach().float().contiguous().numpy()
        bits = a.view(np.uint32).astype(np.uint64)
        u16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        blob = u16.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    return offset


SHARD = "model-00001-of-000001.safetensors"


def write_model_weights(folder, tensors):
    """A model folder's weights: SHARD (BF16) and model.safetensors.index.json. Returns total bytes."""
    total = write_bf16(os.path.join(folder, SHARD), tensors)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {n: SHARD for n in sorted(tensors)}}, f, indent=2)
    return total
