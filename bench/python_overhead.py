#!/usr/bin/env python3
"""Per-inference overhead of the Python package against the C++ API, in the
same process and run: the C++ loop (CompiledModel.bench: InferRequest::infer
on bound inputs) against Request.run and CompiledModel.run from a Python loop
(argument checks, fresh output arrays, GIL release), medians of each.

    PYTHONPATH=build/python python3 bench/python_overhead.py [MODEL.onnx] [--seconds S]
"""

import argparse
import os
import time

import numpy as np

import qfuse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_loop(fn, seconds):
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
    return float(np.median(times)), len(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?",
                   default=os.path.join(ROOT, "tools", "fashion_mnist", "fashion_cnn.onnx"))
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    # The bundled classifier's batch is symbolic: one image.
    shapes = {"input": (1, 1, 28, 28)} if a.model.endswith("fashion_cnn.onnx") else None
    m = qfuse.load(a.model, shapes=shapes)
    c = qfuse.compile(m, threads=a.threads)
    inputs = qfuse.random_inputs(c.inputs)
    r = c.create_request()
    r.set_threads(a.threads)
    rows = []
    for _ in range(3):  # interleaved, so that drift hits every column alike
        cpp = c.bench(inputs, seconds=a.seconds, threads_per_request=a.threads)
        req, _ = python_loop(lambda: r.run(inputs), a.seconds)
        pool, _ = python_loop(lambda: c.run(inputs), a.seconds)
        rows.append((cpp["latency_ms_median"] * 1e3, req, pool))
    cpp_us, req_us, pool_us = (float(np.median([row[k] for row in rows])) for k in range(3))
    impl = next((l["implementation"] for l in c.layers() if l["op"].startswith("Quantized")), "-")
    print(f"model {os.path.basename(a.model)}, {a.threads} thread(s), e.g. {impl}")
    print(f"C++ InferRequest::infer   median {cpp_us:8.2f} us")
    print(f"Python Request.run        median {req_us:8.2f} us  (+{req_us - cpp_us:.2f} us)")
    print(f"Python CompiledModel.run  median {pool_us:8.2f} us  (+{pool_us - cpp_us:.2f} us)")


if __name__ == "__main__":
    main()
