#!/usr/bin/env python3
"""qfuse from Python on the bundled Fashion-MNIST models.

    PYTHONPATH=build/python python3 examples/python/fashion_mnist.py

1. The bundled QAT classifier (tools/fashion_mnist/fashion_cnn.onnx): the
   10,000 test images through fused and unfused, the accuracy line `qfuse run`
   prints, and the per-layer comparison table as a DataFrame.
2. from_torch: the same architecture as a PyTorch QAT module
   (tools/fashion_mnist/train.py's FashionCnn, calibrated on 1,000 training
   images, not trained), exported in memory and compiled; its layers.
"""

import gzip
import os
import sys
import tempfile

import numpy as np

import qfuse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(split):
    return np.ascontiguousarray((idx(f"{split}-images-idx3-ubyte.gz") / np.float32(255))[:, None])


def main():
    x, y = images("t10k"), idx("t10k-labels-idx1-ubyte.gz")
    batches = [(x[i:i + 100], y[i:i + 100]) for i in range(0, len(y), 100)]
    cnn = os.path.join(ROOT, "tools", "fashion_mnist", "fashion_cnn.onnx")

    # 1. Accuracy fused against unfused, and where they differ, layer by layer
    # (the comparison over the first 1,000 images, as `qfuse run` reports it).
    result = qfuse.evaluate(cnn, batches, compare=False)
    print(f"{result.images} test images: {result.line()}")
    table = qfuse.evaluate(cnn, batches[:10]).records
    columns = ["node", "implementation", "max_lsb", "isolated_max_lsb", "equal_share", "snr_db"]
    print(table.to_dataframe()[columns].head(8).to_string())
    report = table.write_html(os.path.join(tempfile.gettempdir(), "qfuse_report_python.html"),
                              title="fashion_cnn", inputs="1000 Fashion-MNIST test images")
    print(f"report: {report}")

    # 2. From PyTorch: train.py's network as a QAT module, exported in memory.
    try:
        import torch
    except ImportError:
        print("from_torch: skipped (python3-torch is not installed)")
        return
    sys.path.insert(0, os.path.join(ROOT, "tools", "fashion_mnist"))
    import train  # noqa: E402  (train.py's model definitions)

    net = train.prepared(train.FashionCnn, seed=1)
    with torch.no_grad():  # calibrate the observers (no training)
        net(torch.from_numpy(images("train")[:1000]))
    compiled = qfuse.from_torch(net, torch.from_numpy(x[:100]))
    layers = compiled.layers()
    int8 = sum(1 for l in layers if l["precision"] == "int8" and l["op"].startswith("Quantized"))
    print(f"from_torch: {int8} int8 layers of {len(layers)} nodes")
    print(layers.to_dataframe()[["node", "op", "precision", "implementation"]].to_string())
    untrained = qfuse.evaluate(compiled, batches[:10], compare=False)
    print(f"from_torch, untrained, 1000 images: {untrained.line()}")


if __name__ == "__main__":
    main()
