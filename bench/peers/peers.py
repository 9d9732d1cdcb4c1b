#!/usr/bin/env python3
"""qfuse against ONNX Runtime 1.30 CPU, side by side, on every model of a corpus.

For each MODEL.onnx and OpenVINO MODEL.xml in CORPUS_DIR (default
build/corpus): the same inputs
(the model's recorded input when the corpus has one, else deterministic
uniform values in [-1, 1]) run through ONNX Runtime (a model it cannot read,
an OpenVINO IR or NNCF's org.openvinotoolkit FakeQuantize, as the QDQ twin
`qfuse export` writes, and its row says so) (npm onnxruntime-node,
installed on first use into bench/peers/.ort with ONNXRUNTIME_NODE_INSTALL=skip:
its CPU binaries ship in the package) and through qfuse, at 1 and 2 threads.
One row per model: medians and their ratio (ORT / qfuse, above 1 qfuse is
faster; PyTorch's 1-element scale tensors are given to ORT as scalars, which
its QLinearAdd/QLinearMul fusions require), peak RSS of each process (ORT's without Node's own before the
session), and the largest difference between the two outputs: in LSB of the
output grid when the model dequantizes its output, else absolute; and how
much is equal (elements on a grid, rows with the same argmax otherwise).

    bench/peers/peers.py [CORPUS_DIR] [--qfuse build/tools/qfuse] [--seconds 3]
                         [--only MODEL ...] [--ort-optimization all|extended|basic|disabled]
    bench/peers/peers.py [CORPUS_DIR] --prequantized [--only MODEL ...]
    bench/peers/peers.py [CORPUS_DIR] --startup [--starts 3] [--cache-dir DIR] [--only MODEL ...]

--prequantized times nothing: it writes each model in the pre-quantized form
(qfuse export-prequantized) and runs the same inputs through ONNX Runtime on
the original and on the export, and through qfuse's integer-only mode on the
original and on the export; one row per model with the differences (LSB of
the original's output grid, and the share equal). Models qfuse cannot export
get a row saying why.

--startup measures what a command-line job or a serverless function meets:
one process that loads the model, compiles it and runs one inference, then
exits. Per model and thread count (1 and 2), the median over --starts process
starts of: its wall time (ONNX Runtime's without Node's own start, the median
of as many bare `node -e 0` runs) and its peak RSS as /usr/bin/time reports it
(ONNX Runtime's without Node's before the session). With --cache-dir, qfuse
is also started with its compiled-model cache there: one start fills the
entry (untimed), then --starts warm starts are timed as further columns.

Not part of CI: it times things and may download the npm package.
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from urllib.parse import quote, unquote

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_DIR = os.path.join(HERE, ".ort")
ORT_VERSION = "1.30.0"


def ensure_ort():
    if os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        return
    os.makedirs(ORT_DIR, exist_ok=True)
    env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
    subprocess.run(["npm", "install", "--prefix", ORT_DIR, "--no-audit", "--no-fund",
                    f"onnxruntime-node@{ORT_VERSION}"], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def make_inputs(path, out_dir, recorded_beside=None):
    """Writes the model's inputs; `recorded_beside` names the corpus file whose
    recorded inputs to look for (the model itself unless it is a twin)."""
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    beside = recorded_beside or path
    stem = os.path.splitext(os.path.basename(beside))[0]
    recorded = os.path.join(os.path.dirname(beside),
                            re.sub(r"_(qdq|wq|f32)$", "", stem) + "_f32.input.npy")
    rng = np.random.default_rng(zlib.crc32(stem.encode()))
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value or 1 for d in tt.shape.dim]  # a symbolic batch: 1
        # The corpus's own inputs for this model (transformers: token ids and
        # the attention mask, INT64), else generated ones.
        own = os.path.join(os.path.dirname(beside), f"{stem}.{vi.name}.npy")
        if os.path.exists(own):
            x = np.load(own)
        elif tt.elem_type == onnx.TensorProto.INT64:
            raise SystemExit(f"{path}: no values for the INT64 input '{vi.name}' ({own})")
        elif os.path.exists(recorded) and len(model.graph.input) - len(inits) <= 1:
            x = np.load(recorded).astype(np.float32)
        else:
            x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        np.save(os.path.join(out_dir, quote(vi.name, safe="-_.!~*'()") + ".npy"), x)


def output_steps(path):
    """Output name -> quantization step when a DequantizeLinear makes it."""
    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t)
              for n in model.graph.node if n.op_type == "Constant" and n.attribute}
    steps = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and any(n.output[0] == o.name for o in model.graph.output):
            s = inits.get(n.input[1], consts.get(n.input[1]))
            if s is not None and s.size == 1:
                steps[n.output[0]] = float(s.reshape(-1)[0])
    return steps


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr[-2000:])
    return p.stdout


ORT_OPT = "all"


def ort(path, inputs, outputs, threads, seconds):
    out = run(["node", os.path.join(HERE, "ort_run.js"), path, inputs, outputs, str(threads),
               str(seconds), ORT_OPT],
              env=dict(os.environ, NODE_PATH=os.path.join(ORT_DIR, "node_modules")))
    r = json.loads(out.strip().splitlines()[-1])
    return r["median_ms"], r["peak_rss_mib"] - r["base_rss_mib"]


def scalar_qparams(path, tmp):
    """ONNX Runtime 1.30's QDQ fusions (QLinearAdd, QLinearMul) refuse the
    1-element scale and zero-point tensors PyTorch writes ("Scale and
    Zero-point must be a scalar"). The same model with those written as
    scalars (the arithmetic is unchanged) lets ORT run its fused kernels.
    Returns `path` when nothing needs it."""
    model = onnx.load(path)
    alias = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity"}
    wanted = set()
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            for name in n.input[1:3]:
                while name in alias:
                    wanted.add(name)
                    name = alias[name]
                wanted.add(name)
    changed = False
    for t in model.graph.initializer:
        if t.name in wanted and list(t.dims) == [1]:
            del t.dims[:]
            changed = True
    if not changed:
        return path
    del model.graph.value_info[:]
    out = os.path.join(tmp, "ort_" + os.path.basename(path))
    onnx.save(model, out)
    return out



def needs_twin(path):
    """ONNX Runtime cannot run an OpenVINO IR, nor an ONNX file with NNCF's
    org.openvinotoolkit FakeQuantize: it runs the model's QDQ twin, which
    `qfuse export` writes (the model as imported, unfused, in plain ONNX)."""
    if path.endswith(".xml"):
        return True
    model = onnx.load(path, load_external_data=False)
    return any(n.domain == "org.openvinotoolkit" for n in model.graph.node)


@contextlib.contextmanager
def prepared(path, exe=None):
    """A scratch directory with the model's inputs (.npy) and the model as ONNX
    Runtime gets it: yields (directory, inputs directory, ORT's model path).
    A model ONNX Runtime cannot read (needs_twin) is given to it as its QDQ
    twin, exported by `exe`; the inputs are the twin's, which has the
    original's input names."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = os.path.join(tmp, "in")
        os.makedirs(inputs)
        onnx_path = path
        if exe and needs_twin(path):
            onnx_path = os.path.join(tmp, "twin_" + os.path.splitext(os.path.basename(path))[0] + ".onnx")
            run([exe, "export", path, onnx_path])
        make_inputs(onnx_path, inputs, recorded_beside=path)
        yield tmp, inputs, scalar_qparams(onnx_path, tmp)


def qfuse(exe, path, inputs, outputs, threads, seconds, tmp):
    js = os.path.join(tmp, f"bench{threads}.json")
    run([exe, "bench", path, "--threads", str(threads), "--time", str(seconds), "--json", js])
    r = json.load(open(js))
    run([exe, "run", path, "--inputs", inputs, "--outputs", outputs, "--threads", str(threads),
         "--repeat", "0"])
    return r["latency_ms_median"], r["peak_rss_mib"]


def compare(path, ort_out, qf_out):
    """`path`: an ONNX file of the model (the twin ONNX Runtime ran, if any)."""
    steps = output_steps(path)
    worst, equal, total, unit = 0.0, 0, 0, "LSB"
    for f in sorted(os.listdir(ort_out)):
        a = np.load(os.path.join(ort_out, f)).astype(np.float64)
        b = np.load(os.path.join(qf_out, f)).astype(np.float64)
        d = np.abs(a - b)
        step = steps.get(unquote(f[:-4]))
        if step:
            d = d / step
            equal += int((d < 0.01).sum())
        else:
            # No grid (a softmax, logits): the answer is what counts, so
            # "equal" is the share of rows with the same argmax.
            unit = "abs"
            rows_a = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
            rows_b = b.reshape(-1, b.shape[-1]) if b.ndim else b.reshape(1, 1)
            same = rows_a.argmax(axis=1) == rows_b.argmax(axis=1)
            equal += int(same.sum()) * (d.size // max(1, same.size))
        total += d.size
        worst = max(worst, float(d.max()) if d.size else 0.0)
    return worst, unit, 100.0 * equal / max(1, total)


def prequantized(exe, models, paths):
    print("| model | layers exported | ORT export vs ORT original | equal | qfuse integer-only vs "
          "ORT export | equal | qfuse export vs qfuse integer-only | equal |")
    print("| --- " * 8 + "|")
    for m, path in zip(models, paths):
        with tempfile.TemporaryDirectory() as tmp:
            exported = os.path.join(tmp, m + "_prequantized.onnx")
            inputs = os.path.join(tmp, "in")
            os.makedirs(inputs)
            make_inputs(path, inputs)
            # Symbolic dimensions bound to the inputs' shapes.
            shape = ",".join(unquote(f[:-4]) + "=" + "x".join(str(d) for d in np.load(os.path.join(inputs, f)).shape)
                             for f in sorted(os.listdir(inputs)))
            p = subprocess.run([exe, "export-prequantized", path, exported, "--shape", shape],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if not os.path.exists(exported):
                why = (p.stderr.strip().splitlines() or ["?"])[-1][:160]
                print(f"| {m} | not exported: {why} |")
                continue
            layers = re.search(r"wrote .*?: (\d+) layers", p.stdout)
            outs = {k: os.path.join(tmp, k) for k in ("ort", "ort_pq", "qf_int", "qf_pq")}
            try:
                ort(path, inputs, outs["ort"], 1, 0)
                ort(exported, inputs, outs["ort_pq"], 1, 0)
            except RuntimeError as e:
                print(f"| {m} | ONNX Runtime cannot run it: {e.args[0].splitlines()[-1][:160]} |")
                continue
            run([exe, "run", path, "--inputs", inputs, "--outputs", outs["qf_int"],
                 "--integer-only", "--repeat", "0", "--shape", shape])
            run([exe, "run", exported, "--inputs", inputs, "--outputs", outs["qf_pq"],
                 "--integer-only", "--repeat", "0"])
            row = [layers.group(1) if layers else "?"]
            for a, b in (("ort_pq", "ort"), ("qf_int", "ort_pq"), ("qf_pq", "qf_int")):
                worst, unit, eq = compare(path, outs[b], outs[a])
                row += [f"{worst:.3g} {unit}", f"{eq:.2f}%"]
            print(f"| {m} | " + " | ".join(row) + " |")
            sys.stdout.flush()


def wall_and_output(cmd, env=None):
    """Wall time (ms) of one process, start to exit; its standard output; and
    its peak RSS (MiB). The RSS comes from /usr/bin/time, whose small process
    forks the command: a child forked from this Python process would count
    Python's own pages, which it holds until exec, in its peak."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        out, err = p.communicate()
        wall = (time.perf_counter() - start) * 1000.0
        if p.returncode != 0:
            raise RuntimeError(" ".join(cmd) + " failed:\n" + err.decode()[-2000:])
        peak = float(rss.read().strip().splitlines()[-1]) / 1024.0
    return wall, out.decode(), peak


def startup(exe, models, paths, starts, cache_dir=None):
    node_env = dict(os.environ, NODE_PATH=os.path.join(ORT_DIR, "node_modules"))
    bare = sorted(wall_and_output(["node", "-e", "0"])[0] for _ in range(starts))[starts // 2]
    print(f"Node's own start: {bare:.1f} ms (subtracted from ONNX Runtime's)")
    cached_head = " qfuse cached ms | ratio cached | qfuse cached RSS MiB |" if cache_dir else ""
    print("| model | threads | ORT ms | qfuse ms | ratio | ORT RSS MiB | qfuse RSS MiB |" + cached_head)
    print("| --- " * (10 if cache_dir else 7) + "|")
    for m, path in zip(models, paths):
        with prepared(path, exe) as (tmp, inputs, ort_path):
            m = label(m, path)
            for t in (1, 2):
                o_ms, o_rss, q_ms, q_rss = [], [], [], []
                try:
                    for _ in range(starts):
                        wall, out, peak = wall_and_output(
                            ["node", os.path.join(HERE, "ort_run.js"), ort_path, inputs,
                             os.path.join(tmp, "ort"), str(t), "startup", ORT_OPT], node_env)
                        r = json.loads(out.strip().splitlines()[-1])
                        o_ms.append(wall - bare)
                        o_rss.append(peak - r["base_rss_mib"])
                except RuntimeError as e:
                    print(f"| {m} | {t} | ONNX Runtime cannot run it: "
                          f"{e.args[0].splitlines()[-1][:160]} |")
                    break
                run = [exe, "run", path, "--inputs", inputs, "--threads", str(t), "--repeat", "0"]
                for _ in range(starts):
                    wall, _, peak = wall_and_output(run)
                    q_ms.append(wall)
                    q_rss.append(peak)
                med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
                row = (f"| {m} | {t} | {med(o_ms):.0f} | {med(q_ms):.0f} | "
                       f"{med(o_ms) / med(q_ms):.2f}x | {med(o_rss):.1f} | {med(q_rss):.1f} |")
                if cache_dir:
                    cached = run + ["--cache-dir", cache_dir]
                    wall_and_output(cached)  # fills the entry
                    # The cache remembers the digests of files unchanged for 2 s
                    # (the entry just written is hashed until then): the start
                    # after that records them, as a user's second start would.
                    time.sleep(2.5)
                    wall_and_output(cached)
                    c_ms, c_rss = [], []
                    for _ in range(starts):
                        wall, _, peak = wall_and_output(cached)
                        c_ms.append(wall)
                        c_rss.append(peak)
                    row += (f" {med(c_ms):.0f} | {med(o_ms) / med(c_ms):.2f}x | "
                            f"{med(c_rss):.1f} |")
                print(row)
                sys.stdout.flush()


def label(model, path):
    """The row's name: a model ONNX Runtime runs as its QDQ twin says so."""
    return model + " (ORT: its QDQ export)" if needs_twin(path) else model


def implementations(exe, paths):
    impls = set()
    for p in paths:
        # qfuse dump lists each layer as "<node> [<op>] <precision> <implementation>".
        out = subprocess.run([exe, "dump", p], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
        impls.update(re.findall(r"\[Quantized\w+\] int8 (\S+)", out))
    return sorted(impls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default=os.path.join("build", "corpus"))
    ap.add_argument("--qfuse", default=os.path.join("build", "tools", "qfuse"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--prequantized", action="store_true",
                    help="check the pre-quantized exports instead of timing (see above)")
    ap.add_argument("--cache-dir", default=None,
                    help="--startup: also time qfuse's warm starts with its compiled-model cache "
                         "in this directory")
    ap.add_argument("--startup", action="store_true",
                    help="time to first result and peak RSS of one process per start (see above)")
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--ort-optimization", default="all",
                    choices=["disabled", "basic", "extended", "all"],
                    help="ONNX Runtime's graph optimization level (disabled: it runs the QDQ "
                         "graph as written, for telling its rewrites from qfuse's numerics)")
    args = ap.parse_args()
    global ORT_OPT
    ORT_OPT = args.ort_optimization
    ensure_ort()
    files = sorted(f for f in os.listdir(args.corpus) if f.endswith((".onnx", ".xml")))
    if args.only:
        files = [f for f in files if os.path.splitext(f)[0] in args.only]
    models = [os.path.splitext(f)[0] for f in files]
    paths = [os.path.join(args.corpus, f) for f in files]
    if args.prequantized:
        onnx_only = [(m, p) for m, p in zip(models, paths) if p.endswith(".onnx")]
        prequantized(args.qfuse, [m for m, _ in onnx_only], [p for _, p in onnx_only])
        return
    if args.startup:
        startup(args.qfuse, models, paths, args.starts, args.cache_dir)
        return
    print("int8 implementations: " + ", ".join(implementations(args.qfuse, paths)))
    print("| model | ORT 1t ms | qfuse 1t ms | ratio 1t | ORT 2t ms | qfuse 2t ms | ratio 2t "
          "| ORT RSS MiB | qfuse RSS MiB | max diff | equal |")
    print("| --- " * 11 + "|")
    for m, path in zip(models, paths):
        with prepared(path, args.qfuse) as (tmp, inputs, ort_path):
            m = label(m, path)
            row, rss = [], [0.0, 0.0]
            try:
                ort(ort_path, inputs, os.path.join(tmp, "ort"), 1, 0)
            except RuntimeError as e:
                print(f"| {m} | ONNX Runtime cannot run it: {e.args[0].splitlines()[-1][:160]} |")
                continue
            for t in (1, 2):
                o_ms, o_rss = ort(ort_path, inputs, os.path.join(tmp, "ort"), t, args.seconds)
                q_ms, q_rss = qfuse(args.qfuse, path, inputs, os.path.join(tmp, "qf"), t,
                                    args.seconds, tmp)
                row += [f"{o_ms:.3f}", f"{q_ms:.3f}", f"{o_ms / q_ms:.2f}x"]
                rss = [max(rss[0], o_rss), max(rss[1], q_rss)]
            worst, unit, eq = compare(ort_path, os.path.join(tmp, "ort"), os.path.join(tmp, "qf"))
            diff = f"{worst:.3g} {unit}"
            print(f"| {m} | " + " | ".join(row) + f" | {rss[0]:.1f} | {rss[1]:.1f} | {diff} | {eq:.1f}% |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
