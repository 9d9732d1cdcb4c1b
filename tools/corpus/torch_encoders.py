#!/usr/bin/env python3
"""Exports small BERT-like PyTorch encoders to float ONNX, as users' exports look.

    python3 tools/corpus/torch_encoders.py [OUT_DIR]

Needs Debian's python3-torch (1.13). Each encoder has token and position
embeddings (Gather), an attention mask applied to the scores the usual way
((1 - mask[:, None, None, :]) * -10000: Unsqueeze / Cast / Sub / Mul), multi-head
self-attention written out (Linear q, k, v; Reshape / Transpose; MatMul; scale;
Softmax; MatMul; Linear), residual adds, LayerNorm and a GELU feed-forward, and
a pooled classification head. Variants:
  encoder_erf_op13     GELU in its erf form, LayerNorm spelled out (opset 13)
  encoder_tanh_op13    GELU in its tanh form, LayerNorm spelled out (opset 13)
  encoder_erf_op17     GELU in its erf form, LayerNormalization (opset 17)
The sequence length is a dynamic axis ("sequence"): qfuse binds it at import.
Weights are seeded (std 0.02, as BERT initializes them), and a few SGD steps on
a synthetic task move them off their initial values. The outputs are small
and committed under tools/corpus/encoders/; tools/corpus/transformers.py
quantizes them in ONNX Runtime's two formats (static QDQ and dynamic).
"""

import math
import os
import sys

import torch
import torch.nn as nn

VOCAB, MAX_LEN, HIDDEN, HEADS, FFN, LAYERS, CLASSES = 512, 128, 64, 4, 256, 2, 4


class Gelu(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form

    def forward(self, x):
        if self.form == "tanh":
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Layer(nn.Module):
    def __init__(self, gelu):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)
        self.gelu = Gelu(gelu)
        self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12)

    def heads(self, x):
        n, s, _ = x.shape
        return x.view(n, s, HEADS, HIDDEN // HEADS).transpose(1, 2)

    def forward(self, x, bias):
        n, s, _ = x.shape
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS) + bias
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.transpose(1, 2).reshape(n, s, HIDDEN)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(self.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, gelu):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(MAX_LEN, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(Layer(gelu) for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        pos = torch.arange(s, dtype=torch.long).unsqueeze(0)
        x = self.ln(self.tokens(input_ids) + self.positions(pos))
        bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x[:, 0])


def init(model, seed):
    torch.manual_seed(seed)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
        else:
            nn.init.zeros_(p)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)


def batch(g, n=16, s=32):
    """Token sequences whose class is the most frequent of 4 token groups; padded tails."""
    ids = torch.randint(1, VOCAB, (n, s), generator=g)
    lengths = torch.randint(s // 2, s + 1, (n,), generator=g)
    mask = (torch.arange(s)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    labels = torch.stack([torch.bincount(r[: int(k)] % CLASSES, minlength=CLASSES).argmax()
                          for r, k in zip(ids, lengths)])
    return ids, mask, labels


def train(model, seed, steps=60):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for _ in range(steps):
        ids, mask, labels = batch(g)
        loss = nn.functional.cross_entropy(model(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def export(model, path, opset):
    ids = torch.ones((1, 16), dtype=torch.long)
    mask = torch.ones((1, 16), dtype=torch.long)
    torch.onnx.export(model, (ids, mask), path, opset_version=opset,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                    "attention_mask": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch"}},
                      do_constant_folding=True)
    print(f"torch_encoders: {path}")


VARIANTS = [("encoder_erf_op13", "erf", 13), ("encoder_tanh_op13", "tanh", 13),
            ("encoder_erf_op17", "erf", 17)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "encoders")
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    for seed, (name, gelu, opset) in enumerate(VARIANTS, start=20):
        model = Encoder(gelu)
        init(model, seed)
        train(model, seed)
        export(model, os.path.join(out, name + ".onnx"), opset)


if __name__ == "__main__":
    main()
