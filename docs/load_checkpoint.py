#!/usr/bin/env python3
"""Loads a ddp-in-c checkpoint (format: docs/formats.md, common/ckpt/ckpt.h) into a PyTorch nn.Sequential.

    python3 docs/load_checkpoint.py CHECKPOINT [FASHION_MNIST_DIR [N]]

prints the header and the sum of every tensor; with a Fashion-MNIST directory it also evaluates the
model on the first N test images (default: all 10,000), normalised as the C programs do.
Needs PyTorch and NumPy (Debian: apt-get install python3-torch; run it with /usr/bin/python3).
"""
import gzip
import os
import sys

# --8<-- begin
import struct
import zlib

import numpy as np
import torch
from torch import nn


def load_checkpoint(path):
    """Returns (model, momentum, header): an nn.Sequential of Linear/ReLU layers, the SGD momentum
    buffers in the same order as model.parameters(), and the header fields as a dict."""
    data = open(path, "rb").read()
    if data[:8] != b"DDPCKPT\0":
        raise ValueError(f"{path}: not a ddp-in-c checkpoint")
    if zlib.crc32(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        raise ValueError(f"{path}: CRC mismatch, the file is corrupt")
    names = "version header_size epoch epoch_step step seed world_size optim optim_steps n_layers"
    h = dict(zip(names.split(), struct.unpack_from("<4I2Q4I", data, 8)))
    if h["version"] not in (1, 2, 3, 4, 5):
        raise ValueError(f"{path}: format version {h['version']}, this loader reads versions 1 to 5")
    sizes = struct.unpack_from(f"<{h['n_layers'] + 1}I", data, 56)
    h["sizes"] = sizes
    if h["version"] >= 2:  # the data set trained on, after the layer sizes
        fields = "kind n_train n_test dim n_classes labels_crc".split()
        h["data"] = dict(zip(fields, struct.unpack_from("<6I", data, 56 + 4 * len(sizes))))
    if h["version"] >= 3:  # how the epoch is cut into steps, after the data set
        fields = "batch_size grad_accum drop_last epoch_samples".split()
        h["steps"] = dict(zip(fields, struct.unpack_from("<4I", data, 56 + 4 * len(sizes) + 24)))
    if h["version"] >= 4:  # the CRC of the pixels trained on, after the step fields
        h["data"]["pixels_crc"] = struct.unpack_from("<I", data, 56 + 4 * len(sizes) + 40)[0]
    if h["version"] >= 5:  # the global batch and the world size the epoch was laid out for
        h["global_batch"], h["epoch_world"] = struct.unpack_from("<2I", data, 56 + 4 * len(sizes) + 44)
    floats = torch.from_numpy(np.frombuffer(data, "<f4", offset=h["header_size"],
                                            count=(len(data) - 4 - h["header_size"]) // 4).copy())
    layers = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])      # no ReLU after the last layer: it outputs logits
    params = list(model.parameters())          # weight [out][in], bias [out], layer by layer
    n = sum(p.numel() for p in params)
    assert floats.numel() == 2 * n, "file size does not match the layer sizes"
    momentum, off = [], 0
    with torch.no_grad():
        for p in params:
            p.copy_(floats[off:off + p.numel()].view_as(p))
            momentum.append(floats[n + off:n + off + p.numel()].view_as(p).clone())
            off += p.numel()
    return model, momentum, h
# --8<-- end


def read_idx(path):
    """An IDX file (gzip'ed) as a NumPy array of uint8."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack_from(">II", data, 0)
    dims = struct.unpack_from(f">{magic & 0xff}I", data, 4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    model, momentum, h = load_checkpoint(sys.argv[1])
    print("header:", {k: v for k, v in h.items()})
    for (name, p), m in zip(model.named_parameters(), momentum):
        print(f"  {name:10s} {tuple(p.shape)!s:12s} sum {p.double().sum().item():+.9e}  "
              f"momentum sum {m.double().sum().item():+.9e}")
    if len(sys.argv) < 3:
        return
    d = sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    images = read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))[:n]
    labels = read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"))[:n]
    # The C programs' normalisation, in float32: pixel / 255, minus the mean, over the std.
    x = (images.reshape(len(images), -1).astype(np.float32) / np.float32(255)
         - np.float32(0.2860)) / np.float32(0.3530)
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    print(f"test accuracy on the first {len(labels)} test images: "
          f"{(pred == labels).mean():.4f} ({(pred == labels).sum()} correct)")


if __name__ == "__main__":
    main()
