"""Reads a Freight checkpoint (safetensors: 8-byte little-endian header length, JSON header,
raw little-endian tensors) into a dict of torch tensors, without the safetensors package
(Debian 12 does not ship it). With that package installed,
safetensors.torch.load_file(path) returns the same dict.

    from freight_checkpoint import load_checkpoint
    state, metadata = load_checkpoint("checkpoints/mlp.safetensors")
    model.load_state_dict(state)
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def load_checkpoint(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    state = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = entry["dtype"]
        if dtype == "BF16":
            words = np.frombuffer(data[begin:end], dtype=np.uint16).astype(np.uint32) << 16
            array = words.view(np.float32)
        else:
            array = np.frombuffer(data[begin:end], dtype=_DTYPES[dtype])
        state[name] = torch.from_numpy(array.copy()).reshape(entry["shape"])
    return state, metadata
