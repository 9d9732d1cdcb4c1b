"""Writes an ONNX model with its inputs' and outputs' first dimension
symbolic ('batch'), as an exporter with a dynamic batch axis writes it.

usage: symbolic_batch.py IN.onnx OUT.onnx
"""
import sys

import onnx


def main() -> None:
    model = onnx.load(sys.argv[1])
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name not in initializers and len(dims) > 0:
            dims[0].dim_param = "batch"
    del graph.value_info[:]
    onnx.save(model, sys.argv[2])


if __name__ == "__main__":
    main()
