#!/usr/bin/env python3
"""Trains the bundled Fashion-MNIST vision transformer with quantization-aware
training and exports it to ONNX QDQ at opset 17.

    /usr/bin/python3 tools/fashion_mnist/train_vit.py [OUT_DIR]

Needs what train.py needs (Debian's python3-torch 1.13 with python3-onnx,
dataset-fashion-mnist; files under /usr/share/datasets/fashion-mnist/) and
shares its data loading. Runs once, deterministically (fixed seeds,
deterministic algorithms, two threads: two runs give the same bytes); its
outputs are committed beside this script, so nothing else needs torch:

  fashion_vit.onnx         patch embedding (conv 7x7 stride 7: 16 tokens of
                           64), learned position embedding, 2 pre-LayerNorm
                           encoder layers (4 heads; attention written out:
                           q, k, v Linear, reshape, transpose, MatMul, softmax,
                           MatMul, output Linear; GELU MLP 64 -> 128 -> 64),
                           a final LayerNorm, the mean of the tokens, a Linear
                           head to 10 classes
  fashion_vit.torch.json   torch's fake-quant top-1 on the 10,000 test images
  fashion_vit.logits.npy   torch's fake-quant logits on them, float32 [10000, 10]

Quantization is placed by hand (torch 1.13's prepare_qat knows no attention):
s8 per-channel symmetric weights (quant_min -128, as train.py's qconfig) on the
convolution and every Linear, u8 per-tensor affine fake quantization on every
tensor a Conv, Linear or MatMul reads: the image, each LayerNorm output that
feeds a Linear, attention's Q, K^T, softmax output and V, the heads' context,
the GELU output and the pooled features. The residual stream, LayerNorm inputs
and the softmax input stay float. Each Linear keeps its weight as [in, out]
and computes x @ W + b, so that the export is DequantizeLinear(axis 1) ->
MatMul (-> Add), the form ONNX's MatMul takes, with no Transpose in between.

Training (about 10 minutes on two shared cores): AdamW, a one-epoch warm-up
and a cosine decay, random horizontal flips; seven float epochs (fake
quantization and observers off), one float epoch with the observers recording
ranges, one QAT epoch, one QAT epoch with the ranges frozen. Evaluation and the
export compute the Linear layers with torch.matmul; training computes them as
1x1 convolutions (see LINEAR_AS_CONV), which changes only the order of float
additions. LayerNorm exports as ONNX LayerNormalization (opset 17), GELU in
its erf form.
"""

import json
import math
import os
import sys
import time

# Before torch loads OpenMP: threads that wait for their team passively. On a
# 2-core machine shared with other jobs, spinning waits made every parallel
# region wait for a descheduled thread; training ran about three times slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.ao.quantization as tq  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import act_fq, images, labels  # noqa: E402

DIM, HEADS, MLP, LAYERS, PATCH, CLASSES = 64, 4, 128, 2, 7, 10
TOKENS = (28 // PATCH) ** 2
# float: fake quantization and observers off; observe: the observers record
# ranges while the float training goes on; qat: fake quantization on;
# frozen: fake quantization on, the observers' ranges kept.
EPOCHS = ["float"] * 7 + ["observe", "qat", "frozen"]
BATCH = 128
LR = 2e-3


def weight_fq(axis):
    # As train.py's qconfig: s8 per output channel, symmetric, so torch's
    # scale is max|w| / 127.5.
    return tq.FakeQuantize(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                           quant_max=127, dtype=torch.qint8,
                           qscheme=torch.per_channel_symmetric, ch_axis=axis)


# Debian's torch links the reference BLAS: a [2048, 64] x [64, 128] product
# with its gradients took about 15 times longer through torch.matmul than as a
# 1x1 convolution, which runs on oneDNN. Training computes every Linear as that
# convolution; evaluation and the export use torch.matmul. The two differ only
# in the order of float additions.
LINEAR_AS_CONV = False


class QLinear(nn.Module):
    """y = x @ W + b with W stored [in, out] and fake-quantized per output
    channel (axis 1), as ONNX's MatMul takes it: nn.Linear's [out, in] weight
    would export as DequantizeLinear -> Transpose -> MatMul. The input is
    quantized by the caller. Initialized as nn.Linear."""

    def __init__(self, n_in, n_out):
        super().__init__()
        init = nn.Linear(n_in, n_out)
        self.weight = nn.Parameter(init.weight.detach().t().contiguous())
        self.bias = nn.Parameter(init.bias.detach().clone())
        self.weight_fq = weight_fq(axis=1)

    def forward(self, x):
        w = self.weight_fq(self.weight)
        if not LINEAR_AS_CONV:
            return torch.matmul(x, w) + self.bias
        # [M, in] -> [1, in, M] (a view), a 1x1 convolution, back to [M, out].
        y = F.conv1d(x.reshape(-1, x.shape[-1]).t()[None], w.t()[:, :, None], self.bias)
        return y[0].t().reshape(*x.shape[:-1], w.shape[1])


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (QLinear(DIM, DIM) for _ in range(4))
        self.q_fq, self.kt_fq, self.p_fq, self.v_fq, self.ctx_fq = (act_fq() for _ in range(5))

    def heads(self, x):
        # [N, S, D] -> [N, H, S, D / H]
        return x.reshape(x.shape[0], TOKENS, HEADS, DIM // HEADS).transpose(1, 2)

    def forward(self, h):
        q, k, v = self.heads(self.q(h)), self.heads(self.k(h)), self.heads(self.v(h))
        scores = torch.matmul(self.q_fq(q), self.kt_fq(k.transpose(-1, -2)))
        p = torch.softmax(scores * (1.0 / math.sqrt(DIM // HEADS)), dim=-1)
        ctx = torch.matmul(self.p_fq(p), self.v_fq(v))
        ctx = ctx.transpose(1, 2).reshape(h.shape[0], TOKENS, DIM)
        return self.o(self.ctx_fq(ctx))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.ln1_fq, self.ln2_fq, self.gelu_fq = act_fq(), act_fq(), act_fq()
        self.attn = Attention()
        self.fc1, self.fc2 = QLinear(DIM, MLP), QLinear(MLP, DIM)

    def forward(self, x):
        x = x + self.attn(self.ln1_fq(self.ln1(x)))
        return x + self.fc2(self.gelu_fq(F.gelu(self.fc1(self.ln2_fq(self.ln2(x))))))


class FashionVit(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_fq = act_fq()
        self.patch = nn.Conv2d(1, DIM, PATCH, stride=PATCH)
        self.patch_fq = weight_fq(axis=0)
        self.position = nn.Parameter(torch.zeros(1, TOKENS, DIM))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.pool_fq = act_fq()
        self.head = QLinear(DIM, CLASSES)

    def forward(self, x):
        x = F.conv2d(self.input_fq(x), self.patch_fq(self.patch.weight), self.patch.bias,
                     stride=PATCH)
        x = x.flatten(2).transpose(1, 2) + self.position  # [N, 49, 64]
        for block in self.blocks:
            x = block(x)
        return self.head(self.pool_fq(self.ln(x).mean(1)))


def batches(n, size, epoch):
    g = torch.Generator().manual_seed(3000 + epoch)
    perm = torch.randperm(n, generator=g)
    for i in range(0, n, size):
        yield perm[i:i + size]


def train(model, x, y):
    """AdamW with a one-epoch linear warm-up and a cosine decay over all epochs;
    random horizontal flips (Fashion-MNIST's classes are left-right symmetric)."""
    global LINEAR_AS_CONV
    n = len(y)
    per_epoch = math.ceil(n / BATCH)
    steps = len(EPOCHS) * per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / per_epoch) * 0.5 * (1.0 + math.cos(math.pi * s / steps)))
    flips = torch.Generator().manual_seed(4000)
    LINEAR_AS_CONV = True
    for epoch, phase in enumerate(EPOCHS):
        start = time.time()
        model.train()
        model.apply(tq.enable_observer if phase in ("observe", "qat") else tq.disable_observer)
        model.apply(tq.enable_fake_quant if phase in ("qat", "frozen") else tq.disable_fake_quant)
        total = 0.0
        for idx in batches(n, BATCH, epoch):
            xb = x[idx]
            flip = torch.rand(len(idx), generator=flips) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), y[idx])
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss) * len(idx)
        print(f"vit epoch {epoch + 1} ({phase}): loss {total / n:.4f}, "
              f"{time.time() - start:.0f} s", flush=True)
    LINEAR_AS_CONV = False
    model.eval()
    model.apply(tq.disable_observer)
    model.apply(tq.enable_fake_quant)


def evaluate(model, x):
    with torch.no_grad():
        return torch.cat([model(x[i:i + 1000]) for i in range(0, len(x), 1000)])


def export(model, path):
    # Opset 17 for LayerNormalization; the batch dimension stays symbolic.
    torch.onnx.export(model, torch.zeros((1, 1, 28, 28)), path, opset_version=17,
                      input_names=["input"], output_names=["output"], do_constant_folding=True,
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    print(f"train_vit: {path}")


def main():
    global LINEAR_AS_CONV
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    start = time.time()
    x, y = images("train"), labels("train")
    xt, yt = images("t10k"), labels("t10k")
    torch.manual_seed(5)
    m = FashionVit()
    train(m, x, y)
    # torch's figures come from the exported form (F.linear); the training
    # form's classes are printed beside them.
    logits = evaluate(m, xt)
    LINEAR_AS_CONV = True
    as_conv = evaluate(m, xt)
    LINEAR_AS_CONV = False
    top1 = float((logits.argmax(1) == yt).float().mean()) * 100.0
    same = float((logits.argmax(1) == as_conv.argmax(1)).float().mean()) * 100.0
    print(f"vit: torch fake-quant top-1 {top1:.2f}% (the training form gives the same class "
          f"on {same:.2f}% of the images), {time.time() - start:.0f} s")
    np.save(os.path.join(out, "fashion_vit.logits.npy"), logits.numpy().astype(np.float32))
    with open(os.path.join(out, "fashion_vit.torch.json"), "w") as f:
        json.dump({"test_images": len(yt), "top1_percent": round(top1, 4)}, f, indent=1)
        f.write("\n")
    export(m, os.path.join(out, "fashion_vit.onnx"))


if __name__ == "__main__":
    main()
