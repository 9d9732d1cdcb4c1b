"""from_torch on a QAT-prepared module, evaluate() against the CLI's
accuracy line, and the Dask run against one process."""

import os
import re
import subprocess

import numpy as np
import pytest

import qfuse

CLI = os.environ.get("QFUSE_CLI")


def small_qat_net(backend="qnnpack"):
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = tq.QuantStub()
            self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
            self.relu1 = nn.ReLU()
            self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.relu2 = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 10)
            self.dequant = tq.DeQuantStub()

        def forward(self, x):
            x = self.relu2(self.conv2(self.relu1(self.conv1(self.quant(x)))))
            return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))

    torch.manual_seed(0)
    net = Net()
    net.train()
    tq.fuse_modules_qat(net, [["conv1", "relu1"], ["conv2", "relu2"]], inplace=True)
    # torch's default QAT qconfigs: fused observer + fake-quantizer modules,
    # u8 activations over 0..255 (qnnpack) or 0..127 (fbgemm's reduce_range,
    # which torch exports as QuantizeLinear -> Clip -> DequantizeLinear).
    net.qconfig = tq.get_default_qat_qconfig(backend)
    tq.prepare_qat(net, inplace=True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(8):  # observers calibrate on data
            net(torch.rand(16, 1, 28, 28, generator=g))
    net.apply(tq.disable_observer)
    return net


@pytest.mark.parametrize("backend", ["qnnpack", "fbgemm"])
def test_from_torch_compiles_a_qat_module_int8(test_set, backend):
    torch = pytest.importorskip("torch")
    net = small_qat_net(backend)
    x = test_set[0][:8]
    compiled = qfuse.from_torch(net, torch.from_numpy(x))
    layers = compiled.layers()
    int8 = [(l["node"], l["op"]) for l in layers if l["precision"] == "int8" and l["macs"] > 0]
    # fc reads the pool's mean, which the module never quantizes: it runs on
    # the sums of the codes, in integers.
    assert int8 == [("/conv1/Conv", "QuantizedConvolution"),
                    ("/conv2/Conv", "QuantizedConvolution"),
                    ("/fc/Gemm/matmul", "MeanInnerProduct")], layers.to_dataframe()
    assert not compiled.refusals()
    assert net.training  # the caller's mode is left as it was
    net.eval()
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    unfused = qfuse.compile(compiled.model, fuse=False).run({"input": x})["output"]
    fused = compiled.run({"input": x})["output"]
    # torch's fake quantization and ONNX's arithmetic agree up to f32 rounding near ties.
    assert np.abs(unfused - expected).max() < 0.05, np.abs(unfused - expected).max()
    assert (np.argmax(fused, 1) == np.argmax(unfused, 1)).mean() >= 0.99
    records = qfuse.compare(compiled.model, {"input": x})
    assert all(r["isolated_max_lsb"] <= 1.0 + 1e-6 for r in records if r["quantized"])


def batches(images, labels, size):
    for i in range(0, len(labels), size):
        yield images[i:i + size], labels[i:i + size]


def test_evaluate_gives_the_cli_accuracy_line(cnn_path, test_set):
    if not CLI:
        pytest.skip("QFUSE_CLI not set (ctest sets it)")
    images, labels = test_set
    ev = qfuse.evaluate(cnn_path, batches(images, labels, 100), compare=False)
    assert ev.images == 10000
    run = subprocess.run([CLI, "run", "default"], check=True, capture_output=True, text=True,
                         cwd=os.environ.get("TMPDIR", "/tmp"))
    line = next(l for l in run.stdout.splitlines() if l.startswith("accuracy: torch"))
    cli = re.sub(r"^accuracy: torch [0-9.]+%, ", "accuracy: ", line)
    assert ev.line() == cli


def test_evaluate_with_torch_loader_and_per_layer_table(cnn_path, test_set):
    torch = pytest.importorskip("torch")
    images, labels = test_set
    ds = torch.utils.data.TensorDataset(torch.from_numpy(images[:500]), torch.from_numpy(labels[:500]))
    loader = torch.utils.data.DataLoader(ds, batch_size=64)  # the last batch holds 52
    ev = qfuse.evaluate(cnn_path, loader)
    assert ev.images == 500
    df = ev.records.to_dataframe()
    assert df["elements"].iloc[-1] == 500 * 10 and df["graph_output"].iloc[-1]
    # The same as Comparisons run directly on those batches (one per batch shape), merged.
    full = qfuse.Comparison(qfuse.load(cnn_path, shapes={"input": (64, 1, 28, 28)}))
    last = qfuse.Comparison(qfuse.load(cnn_path, shapes={"input": (52, 1, 28, 28)}))
    for i in range(0, 448, 64):
        full.run({"input": images[i:i + 64]})
    last.run({"input": images[448:500]})
    direct = qfuse.merge(full.records(), last.records())
    assert list(ev.records) == list(direct)
    assert ev.unfused_correct == int(np.sum(np.argmax(
        qfuse.compile(qfuse.load(cnn_path, shapes={"input": (500, 1, 28, 28)}), fuse=False)
        .run({"input": images[:500]})["output"], 1) == labels[:500]))


def compiled_on_this_process():
    import sys

    return [len(e._by_shape) for e in sys.modules["qfuse.evaluate"]._EVALUATORS.values()]


def test_dask_local_cluster_equals_one_process(cnn_path, test_set):
    distributed = pytest.importorskip("distributed")
    import qfuse.distributed

    images, labels = test_set
    parts = [list(batches(images[i:i + 600], labels[i:i + 600], 200)) for i in range(0, 3000, 600)]
    local = qfuse.evaluate_partitions(cnn_path, parts, threads=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = qfuse.distributed.evaluate(client, cnn_path, parts, threads=1)
        # Each worker compiled once: its process holds (at most) one Evaluator
        # with one Comparison (every batch has the same shape).
        counts = client.run(compiled_on_this_process)
    print(remote.line())
    print(remote.records.to_dataframe()[["node", "elements", "max_lsb", "isolated_max_lsb",
                                         "equal_share", "snr_db"]].to_string())
    assert remote.images == local.images == 3000
    assert (remote.fused_correct, remote.unfused_correct, remote.agree) == \
        (local.fused_correct, local.unfused_correct, local.agree)
    assert list(remote.records) == list(local.records)  # every figure, bit for bit
    assert all(c in ([], [1]) for c in counts.values()) and [1] in counts.values(), counts


def test_from_torch_compiles_a_converted_module_int8(test_set):
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq

    net = small_qat_net()
    net.eval()
    converted = tq.convert(net)  # torch's own int8 modules
    x = test_set[0][:8]
    compiled = qfuse.from_torch(converted, torch.from_numpy(x))
    int8 = [l["node"] for l in compiled.layers()
            if l["op"].startswith("Quantized") and l["precision"] == "int8"]
    assert int8 == ["/conv1/Conv", "/conv2/Conv", "/fc/Gemm"], compiled.layers().to_dataframe()
    with torch.no_grad():
        expected = converted(torch.from_numpy(x)).numpy()
    got = compiled.run({"input": x})["output"]
    # torch's int8 engine and qfuse's fused layers: within one quantum of the output grid.
    assert np.abs(got - expected).max() <= float(converted.fc.scale) * (1 + 1e-6)
