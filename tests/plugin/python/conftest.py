"""Shared fixtures: the bundled Fashion-MNIST classifier and its test set."""

import gzip
import os

import numpy as np
import pytest

# tests/plugin/python/ -> the source tree's root.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CNN = os.path.join(ROOT, "tools", "fashion_mnist", "fashion_cnn.onnx")
DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


@pytest.fixture(scope="session")
def test_set():
    images = (idx("t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0)[:, None, :, :]
    labels = idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    return np.ascontiguousarray(images), labels


@pytest.fixture(scope="session")
def cnn_path():
    return CNN
