#!/usr/bin/env python3
"""Trains the two bundled Fashion-MNIST models with quantization-aware training
and exports them to ONNX QDQ.

    python3 tools/fashion_mnist/train.py [OUT_DIR]

Needs Debian's python3-torch (1.13) and dataset-fashion-mnist (files under
/usr/share/datasets/fashion-mnist/). Runs once, deterministically (fixed seeds,
deterministic algorithms, two threads); its outputs are committed beside this
script, so nothing else needs torch:

  fashion_cnn.onnx         classifier: conv, strided conv, depthwise + pointwise
                           conv with a residual add, strided conv, global pool,
                           fully-connected; QAT (per-channel s8 weights, u8
                           activations), Conv-BN pairs fused for QAT, 88-90%
  fashion_cnn.torch.json   torch's fake-quant top-1 on the 10,000 test images
  fashion_cnn.logits.npy   torch's fake-quant logits on them, float32 [10000, 10]
  fashion_dae.onnx         denoising autoencoder: two strided convs, two
                           ConvTranspose layers, sigmoid; QAT with explicit
                           fake quantization around the ConvTranspose layers
                           (torch 1.13's prepare_qat does not cover them)
  fashion_dae.torch.json   torch's fake-quant PSNR against the clean test images
  fashion_dae.psnr.npy     per test image, float32 [10000]

The third bundled model, a vision transformer (fashion_vit.*), is trained by
train_vit.py beside this script, which reuses its data loading.

The autoencoder's noise is reproducible without numpy's generator: for pixel i
of the whole test set (image-major), n = 0.5 * (u(i) - 0.5) where u(i) is the
top 24 bits of splitmix64(i) / 2^24; the noisy input is clip(x + n, 0, 1).
qfuse's C++ side computes the same (tools/common/fashion_mnist.hpp).
"""

import gzip
import json
import os
import sys

import numpy as np
import torch
import torch.nn.intrinsic.qat as nniqat
import torch.ao.quantization as tq
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(split):
    x = load_idx(f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    return torch.from_numpy(x).unsqueeze(1)


def labels(split):
    return torch.from_numpy(load_idx(f"{split}-labels-idx1-ubyte.gz").astype(np.int64))


MASK64 = (1 << 64) - 1


def noise(count, offset=0):
    """0.5 * (u - 0.5), u from splitmix64 of the element index (see the docstring)."""
    z = (np.arange(offset, offset + count, dtype=np.uint64) + np.uint64(1)) * np.uint64(
        0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24)
    return np.float32(0.5) * (u - np.float32(0.5))


def noisy(x, offset=0):
    n = torch.from_numpy(noise(x.numel(), offset).reshape(x.shape))
    return torch.clamp(x + n, 0.0, 1.0)


def qat_qconfig():
    act = tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0,
                                    quant_max=255, dtype=torch.quint8,
                                    qscheme=torch.per_tensor_affine)
    weight = tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver,
                                       quant_min=-128, quant_max=127, dtype=torch.qint8,
                                       qscheme=torch.per_channel_symmetric, ch_axis=0)
    return tq.QConfig(activation=act, weight=weight)


def act_fq():
    return tq.FakeQuantize(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                           dtype=torch.quint8, qscheme=torch.per_tensor_affine)


def deconv_weight_fq():
    # ConvTranspose weights are [IC, OC, k, k]: per output channel is axis 1.
    return tq.FakeQuantize(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                           quant_max=127, dtype=torch.qint8,
                           qscheme=torch.per_channel_symmetric, ch_axis=1)


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.relu2 = nn.ReLU()
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.bn3 = nn.BatchNorm2d(32)
        self.relu3 = nn.ReLU()
        self.pw = nn.Conv2d(32, 32, 1, bias=False)
        self.bn4 = nn.BatchNorm2d(32)
        self.add = nn.quantized.FloatFunctional()
        self.conv3 = nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False)
        self.bn5 = nn.BatchNorm2d(64)
        self.relu5 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        # torch's int8 pooling requantizes its output; written out, so that
        # the exported fully-connected layer reads a quantized input.
        self.pool_fq = act_fq()
        self.fc = nn.Linear(64, 10)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        a = self.relu1(self.bn1(self.conv1(x)))
        b = self.relu2(self.bn2(self.conv2(a)))
        c = self.relu3(self.bn3(self.dw(b)))
        d = self.bn4(self.pw(c))
        s = self.add.add_relu(b, d)
        e = self.relu5(self.bn5(self.conv3(s)))
        y = self.fc(self.pool_fq(torch.flatten(self.pool(e), 1)))
        return self.dequant(y)

    def fuse(self):
        tq.fuse_modules_qat(self, [["conv1", "bn1", "relu1"], ["conv2", "bn2", "relu2"],
                                   ["dw", "bn3", "relu3"], ["pw", "bn4"],
                                   ["conv3", "bn5", "relu5"]], inplace=True)


class FashionDae(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.enc1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.relu1 = nn.ReLU()
        self.enc2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.relu2 = nn.ReLU()
        self.dequant = tq.DeQuantStub()
        # The decoder, quantized by hand.
        self.dec1 = nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)
        self.dec2 = nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1)
        self.h_fq, self.d1_fq, self.d2_fq, self.out_fq = act_fq(), act_fq(), act_fq(), act_fq()
        self.w1_fq, self.w2_fq = deconv_weight_fq(), deconv_weight_fq()

    def forward(self, x):
        x = self.quant(x)
        h = self.relu2(self.enc2(self.relu1(self.enc1(x))))
        h = self.h_fq(self.dequant(h))
        d = F.relu(F.conv_transpose2d(h, self.w1_fq(self.dec1.weight), self.dec1.bias, stride=2,
                                      padding=1))
        d = self.d1_fq(d)
        y = self.d2_fq(F.conv_transpose2d(d, self.w2_fq(self.dec2.weight), self.dec2.bias,
                                          stride=2, padding=1))
        return self.out_fq(torch.sigmoid(y))

    def fuse(self):
        tq.fuse_modules_qat(self, [["enc1", "relu1"], ["enc2", "relu2"]], inplace=True)


def prepared(net, seed):
    torch.manual_seed(seed)
    m = net()
    m.train()
    m.fuse()
    m.qconfig = qat_qconfig()
    tq.prepare_qat(m, inplace=True)
    return m


def batches(n, size, epoch):
    g = torch.Generator().manual_seed(1000 + epoch)
    perm = torch.randperm(n, generator=g)
    for i in range(0, n, size):
        yield perm[i:i + size]


def train(model, epochs, loss_of, n, log):
    """Float epochs first (fake quantization off, observers on), then QAT epochs;
    the last with observers and batch-norm statistics frozen."""
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch, phase in enumerate(epochs):
        model.train()
        model.apply(tq.enable_observer)
        model.apply(tq.enable_fake_quant if phase != "float" else tq.disable_fake_quant)
        if phase == "frozen":
            model.apply(tq.disable_observer)
            model.apply(nniqat.freeze_bn_stats)
            for group in opt.param_groups:
                group["lr"] = 2e-4
        total = 0.0
        for idx in batches(n, 128, epoch):
            opt.zero_grad()
            loss = loss_of(idx)
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        print(f"{log} epoch {epoch + 1} ({phase}): loss {total / n:.4f}", flush=True)
    model.eval()
    model.apply(tq.disable_observer)
    model.apply(tq.enable_fake_quant)


def export(model, path):
    # The batch dimension stays symbolic ("batch"): qfuse fixes it at import.
    torch.onnx.export(model, torch.zeros((1, 1, 28, 28)), path, opset_version=13,
                      input_names=["input"], output_names=["output"], do_constant_folding=True,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    print(f"train: {path}")


def cnn(out):
    x, y = images("train"), labels("train")
    xt, yt = images("t10k"), labels("t10k")
    m = prepared(FashionCnn, seed=1)
    train(m, ["float", "float", "float", "qat", "frozen"],
          lambda i: F.cross_entropy(m(x[i]), y[i]),
          len(y), "cnn")
    with torch.no_grad():
        logits = torch.cat([m(xt[i:i + 1000]) for i in range(0, len(yt), 1000)])
    top1 = float((logits.argmax(1) == yt).float().mean()) * 100.0
    print(f"cnn: torch fake-quant top-1 {top1:.2f}%")
    np.save(os.path.join(out, "fashion_cnn.logits.npy"), logits.numpy().astype(np.float32))
    with open(os.path.join(out, "fashion_cnn.torch.json"), "w") as f:
        json.dump({"test_images": len(yt), "top1_percent": round(top1, 4)}, f, indent=1)
        f.write("\n")
    export(m, os.path.join(out, "fashion_cnn.onnx"))


def psnr(a, b):
    mse = ((a - b) ** 2).flatten(1).mean(1).clamp_min(1e-12)
    return 10.0 * torch.log10(1.0 / mse)


def dae(out):
    x = images("train")
    xn = noisy(x, offset=10**9)  # training noise, away from the test set's indices
    xt = images("t10k")
    xtn = noisy(xt)
    m = prepared(FashionDae, seed=2)
    train(m, ["float", "qat", "frozen"], lambda i: F.mse_loss(m(xn[i]), x[i]), len(x), "dae")
    with torch.no_grad():
        rec = torch.cat([m(xtn[i:i + 1000]) for i in range(0, len(xt), 1000)])
    per_image = psnr(rec, xt)
    noisy_psnr = float(psnr(xtn, xt).mean())
    mean_psnr = float(per_image.mean())
    print(f"dae: torch fake-quant PSNR {mean_psnr:.3f} dB (noisy input {noisy_psnr:.3f} dB)")
    np.save(os.path.join(out, "fashion_dae.psnr.npy"), per_image.numpy().astype(np.float32))
    with open(os.path.join(out, "fashion_dae.torch.json"), "w") as f:
        json.dump({"test_images": len(xt), "psnr_db": round(mean_psnr, 4),
                   "noisy_input_psnr_db": round(noisy_psnr, 4)}, f, indent=1)
        f.write("\n")
    export(m, os.path.join(out, "fashion_dae.onnx"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    cnn(out)
    dae(out)


if __name__ == "__main__":
    main()
