#!/usr/bin/env python3
"""Writes the bad-input corpus: malformed ONNX models, each a small variation
of one valid QDQ model, and malformed OpenVINO IRs (.xml + .bin), each a
variation of one valid IR written by tools/corpus/openvino_models.py, into
models/. tests/bad_inputs/cases.tsv lists, for
each file, the stage that must fail and the message it must give; the test
(bad_inputs_test.cpp) checks them, and the fuzzers start from these files.

    /usr/bin/python3 tests/bad_inputs/make_cases.py
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "corpus"))
import openvino_models  # noqa: E402


def tensor(name, array, dtype=None):
    a = np.asarray(array, dtype=dtype)
    return numpy_helper.from_array(a, name)


def qdq_conv(x_scale=0.02, x_zp=128, w_scale=None, w_zp=None, axis=None, conv_attrs=None,
             x_shape=(1, 3, 8, 8), w_shape=(4, 3, 3, 3), zp_dtype=np.uint8, opset=13,
             extra_nodes=(), extra_inits=(), drop=(), output="y"):
    """x -> Q -> DQ -> Conv(DQ(w_q)) + b -> y: the valid base model."""
    rng = np.random.default_rng(0)
    oc = w_shape[0]
    if w_scale is None:
        w_scale = np.full([oc], 0.01, np.float32)
    w_q = rng.integers(-50, 50, size=w_shape).astype(np.int8)
    inits = [
        tensor("x_scale", np.float32(x_scale)),
        tensor("x_zp", np.asarray(x_zp).astype(zp_dtype)),
        tensor("w_q", w_q),
        tensor("w_scale", np.asarray(w_scale, np.float32)),
        tensor("w_zp", np.zeros(np.shape(w_scale), np.int8) if w_zp is None else np.asarray(w_zp)),
        tensor("b", np.zeros([oc], np.float32)),
    ] + list(extra_inits)
    inits = [t for t in inits if t.name not in drop]
    dq_w_attrs = {} if axis is None else {"axis": axis}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"], name="q_x"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], name="dq_w",
                         **({"axis": 0} if np.ndim(w_scale) == 1 and axis is None else dq_w_attrs)),
        helper.make_node("Conv", ["x_dq", "w", "b"], ["c"], name="conv",
                         **(conv_attrs or {"pads": [1, 1, 1, 1]})),
        helper.make_node("Relu", ["c"], [output], name="relu"),
    ] + list(extra_nodes)
    graph = helper.make_graph(
        nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def single(op, inputs, outputs, inits, in_infos, attrs=None, opset=13, domain=""):
    node = helper.make_node(op, [i for i in inputs], outputs, name=op.lower(), domain=domain,
                            **(attrs or {}))
    graph = helper.make_graph([node], "bad", in_infos,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outputs], inits)
    ops = [helper.make_opsetid("", opset)]
    if domain:
        ops.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=ops)


def f32_input(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(name, model):
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(model if isinstance(model, bytes) else model.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    base = qdq_conv()
    base_bytes = base.SerializeToString()
    save("valid_qdq_conv", base)

    # Protobuf.
    save("empty_file", b"")
    save("truncated_half", base_bytes[: len(base_bytes) // 2])
    save("truncated_last_byte", base_bytes[:-1])
    save("random_bytes", bytes(np.random.default_rng(1).integers(0, 256, 512, dtype=np.uint8)))
    flipped = bytearray(base_bytes)
    flipped[12] ^= 0xFF
    save("corrupt_length_byte", bytes(flipped))
    save("tensor_not_model", tensor("t", np.ones([4], np.float32)).SerializeToString())
    save("no_graph", onnx.ModelProto(ir_version=8).SerializeToString())

    # Shapes and ranks.
    save("conv_weights_rank3", qdq_conv(w_shape=(4, 3, 3)))
    save("conv_channels_mismatch", qdq_conv(w_shape=(4, 5, 3, 3)))
    save("conv_group_not_dividing", qdq_conv(conv_attrs={"group": 2, "pads": [1, 1, 1, 1]}))
    save("conv_kernel_larger_than_input", qdq_conv(w_shape=(4, 3, 11, 11), conv_attrs={}))
    save("conv_stride_zero", qdq_conv(conv_attrs={"strides": [0, 1]}))
    save("conv_strides_float_attribute",
         qdq_conv(conv_attrs={"strides": [1.0, 1.0]}))
    save("matmul_inner_mismatch", single(
        "MatMul", ["a", "w"], ["y"], [tensor("w", np.ones([5, 4], np.float32))],
        [f32_input("a", [2, 3])]))
    save("add_not_broadcastable", single(
        "Add", ["a", "c"], ["y"], [tensor("c", np.ones([3, 5], np.float32))],
        [f32_input("a", [2, 4])]))
    save("reshape_wrong_count", single(
        "Reshape", ["a", "s"], ["y"], [tensor("s", np.array([5, 5], np.int64))],
        [f32_input("a", [2, 3])]))
    save("concat_mismatch", single(
        "Concat", ["a", "c"], ["y"], [tensor("c", np.ones([2, 3, 7], np.float32))],
        [f32_input("a", [2, 4, 5])], attrs={"axis": 1}))
    save("transpose_bad_perm", single(
        "Transpose", ["a"], ["y"], [], [f32_input("a", [2, 3, 4])], attrs={"perm": [0, 0, 1]}))
    save("maxpool_stride_zero", single(
        "MaxPool", ["a"], ["y"], [], [f32_input("a", [1, 2, 8, 8])],
        attrs={"kernel_shape": [2, 2], "strides": [0, 0]}))
    save("slice_step_zero", single(
        "Slice", ["a", "st", "en", "ax", "sp"], ["y"],
        [tensor("st", np.array([0], np.int64)), tensor("en", np.array([2], np.int64)),
         tensor("ax", np.array([1], np.int64)), tensor("sp", np.array([0], np.int64))],
        [f32_input("a", [2, 4])]))
    save("gather_index_out_of_range", single(
        "Gather", ["c", "i"], ["y"],
        [tensor("c", np.ones([4, 3], np.float32)), tensor("i", np.array([7], np.int64))],
        [], attrs={"axis": 0}))
    save("negative_input_dimension", qdq_conv(x_shape=(1, 3, -5, 8)))

    # Scales.
    save("q_scale_zero", qdq_conv(x_scale=0.0))
    save("q_scale_negative", qdq_conv(x_scale=-0.02))
    save("q_scale_nan", qdq_conv(x_scale=float("nan")))
    save("q_scale_inf", qdq_conv(x_scale=float("inf")))
    save("dq_weight_scale_inf_channel", qdq_conv(w_scale=[0.01, np.inf, 0.01, 0.01]))
    save("dq_weight_scale_nan_channel", qdq_conv(w_scale=[0.01, 0.01, np.nan, 0.01]))
    save("dq_weight_scale_zero_channel", qdq_conv(w_scale=[0.01, 0.0, 0.01, 0.01]))
    save("denormal_scale_runs", qdq_conv(w_scale=[0.01, 1e-41, 0.01, 0.01]))
    save("qlinearconv_zero_scale", qlinear_conv(y_scale=0.0))
    save("qlinearconv_nan_weight_scale", qlinear_conv(y_scale=0.05, w_scale=np.nan))
    save("qlinearconv_inf_output_scale", qlinear_conv(y_scale=np.inf))

    # Zero points.
    save("zero_point_int32_out_of_u8", qdq_conv(x_zp=300, zp_dtype=np.int32))
    save("zero_point_type_mismatch", mismatched_zp())
    save("zero_point_per_channel_size", qdq_conv(w_zp=np.zeros([3], np.int8)))

    # Per-channel sizes.
    save("per_channel_scale_size", qdq_conv(w_scale=[0.01, 0.01, 0.01]))
    save("per_channel_axis_out_of_range", qdq_conv(axis=5))
    save("per_channel_activation_scale_size", per_axis_activation())

    # Unknown ops, cycles, missing tensors.
    save("unknown_op", single("FooBarOp", ["a"], ["y"], [], [f32_input("a", [2, 3])]))
    save("unknown_domain", single("Relu", ["a"], ["y"], [], [f32_input("a", [2, 3])],
                                  domain="com.example.custom"))
    save("fake_quantize_levels_one", fake_quantize_model(levels=1))
    save("fake_quantize_inverted_limits", fake_quantize_model(il=1.0, ih=-1.0))
    save("cycle", cycle_model())
    # ONNX Runtime's QOperator format (com.microsoft).
    save("qlinear_add_runtime_scale", qoperator("QLinearAdd", ["a", "sa", "z", "b", "s", "z", "s", "z"],
                                                extra_inputs=[f32_input("sa", [1])]))
    save("qlinear_add_too_few_inputs", qoperator("QLinearAdd", ["a", "s", "z", "b", "s", "z"]))
    save("qlinear_add_types_differ", qoperator("QLinearAdd", ["a", "s", "z", "c", "s", "zs", "s", "z"]))
    save("qlinear_sigmoid_per_channel_scale", qoperator("QLinearSigmoid", ["a", "s2", "z", "s", "z"]))
    save("qlinear_concat_broken_tuple", qoperator("QLinearConcat", ["s", "z", "a", "s", "z", "b"],
                                                  {"axis": 1}))
    save("qlinear_global_average_pool_channels_last_2", qoperator(
        "QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], {"channels_last": 2}))
    save("qlinear_softmax_without_opset", qoperator("QLinearSoftmax", ["a", "s", "z", "s", "z"]))
    save("qgemm_trans_a", qoperator("QGemm", ["a", "s", "z", "w", "s", "zs", "", "s", "z"],
                                    {"transA": 1}))
    save("missing_initializer", qdq_conv(drop=("w_q",)))
    save("undefined_graph_output", undefined_output())
    save("opset_too_old", qdq_conv(opset=5))

    # Dimensions whose products overflow.
    save("input_dims_overflow", qdq_conv(x_shape=(1, 3, 1 << 31, 1 << 31)))
    save("constant_of_shape_overflow", single(
        "ConstantOfShape", ["s"], ["y"], [tensor("s", np.array([1 << 40, 1 << 40], np.int64))], []))
    save("reshape_dims_overflow", single(
        "Reshape", ["a", "s"], ["y"], [tensor("s", np.array([1 << 40, 1 << 40, 1 << 40], np.int64))],
        [f32_input("a", [2, 3])]))
    # A zero dimension makes the element count 0 and must not hide the
    # overflow of the other dimensions' product (fuzz finding).
    save("flatten_zero_dim_hides_overflow", single(
        "Flatten", ["a"], ["y"], [], [f32_input("a", [0, 1 << 31, 1 << 31])], attrs={"axis": 1}))
    save("gather_zero_dim_hides_overflow", single(
        "Gather", ["c", "i"], ["y"],
        [helper.make_tensor("c", TensorProto.FLOAT, [0, 1 << 31, 1 << 31], []),
         tensor("i", np.array([0], np.int64))],
        [], attrs={"axis": 0}))

    # External data.
    save("external_data_missing_file", external_data("no_such_file.bin", 0, 144))
    save("external_data_outside_model_dir", external_data("../../../../etc/passwd", 0, 144))
    save("external_data_offset_past_end", external_data("valid_qdq_conv.onnx", 1 << 30, 144))
    save("external_data_wrong_length", external_data("external_weights.bin", 0, 100))
    weights = np.linspace(-1, 1, 36, dtype=np.float32)
    with open(os.path.join(OUT, "external_weights.bin"), "wb") as f:
        f.write(b"\0" * 16 + weights.tobytes())
    save("external_data_valid", external_data("external_weights.bin", 16, 144))
    openvino_cases()


def qlinear_conv(y_scale, w_scale=0.01):
    rng = np.random.default_rng(0)
    inits = [
        tensor("x_s", np.float32(0.02)), tensor("x_zp", np.uint8(128)),
        tensor("w", rng.integers(-50, 50, size=(4, 3, 3, 3)).astype(np.int8)),
        tensor("w_s", np.float32(w_scale)), tensor("w_zp", np.int8(0)),
        tensor("y_s", np.float32(y_scale)), tensor("y_zp", np.uint8(0)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["xq"], name="q"),
        helper.make_node("QLinearConv", ["xq", "x_s", "x_zp", "w", "w_s", "w_zp", "y_s", "y_zp"],
                         ["yq"], name="qconv", pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["yq", "y_s", "y_zp"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(nodes, "bad", [f32_input("x", [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def mismatched_zp():
    """DequantizeLinear of a u8 tensor with an s8 zero point."""
    inits = [tensor("s", np.float32(0.1)), tensor("zp", np.int8(3)),
             tensor("q", np.arange(6, dtype=np.uint8).reshape(2, 3))]
    node = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq")
    graph = helper.make_graph([node], "bad", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def per_axis_activation():
    inits = [tensor("s", np.full([5], 0.1, np.float32)), tensor("zp", np.zeros([5], np.uint8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q", axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq", axis=1)]
    graph = helper.make_graph(nodes, "bad", [f32_input("x", [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def fake_quantize_model(levels=256, il=-1.0, ih=1.0):
    """NNCF's ONNX quantizer (domain org.openvinotoolkit) with the given levels and limits."""
    inits = [tensor("il", np.float32(il)), tensor("ih", np.float32(ih)),
             tensor("ol", np.float32(il)), tensor("oh", np.float32(ih))]
    model = single("FakeQuantize", ["a", "il", "ih", "ol", "oh"], ["y"], inits,
                   [f32_input("a", [2, 3])], {"levels": levels}, domain="org.openvinotoolkit")
    model.graph.node[0].name = "a_fq"
    return model


def qoperator(op, inputs, attrs=None, extra_inputs=()):
    """One com.microsoft operator of ONNX Runtime's QOperator format on u8 codes
    a, b [1, 4] and x [1, 4, 2, 2], s8 codes c [1, 4]; scale s, 2-value scale
    s2, u8 zero point z, s8 zero point zs, s8 weights w [4, 4]."""
    inits = [tensor("s", np.float32(0.1)), tensor("s2", np.array([0.1, 0.2], np.float32)),
             tensor("z", np.uint8(128)), tensor("zs", np.int8(0)),
             tensor("w", np.ones((4, 4), np.int8))]
    infos = [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 4]),
             helper.make_tensor_value_info("b", TensorProto.UINT8, [1, 4]),
             helper.make_tensor_value_info("c", TensorProto.INT8, [1, 4]),
             helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 2, 2])]
    return single(op, inputs, ["y"], inits, infos + list(extra_inputs), attrs,
                  domain="com.microsoft")


def cycle_model():
    nodes = [helper.make_node("Add", ["x", "b_out"], ["a_out"], name="a"),
             helper.make_node("Relu", ["a_out"], ["b_out"], name="b")]
    graph = helper.make_graph(nodes, "bad", [f32_input("x", [2, 3])],
                              [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def undefined_output():
    node = helper.make_node("Relu", ["x"], ["r"], name="relu")
    graph = helper.make_graph([node], "bad", [f32_input("x", [2, 3])],
                              [helper.make_tensor_value_info("nowhere", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def external_data(location, offset, length):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 3, 3, 1])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = w.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    graph = helper.make_graph([node], "bad", [f32_input("x", [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def ir_conv_block():
    """A valid IR v11: FakeQuantize -> Convolution (compressed weights) + bias -> ReLU."""
    m = openvino_models.IrModel("ir_conv", seed=5)
    x = m.fq_act(m.parameter("x", (1, 3, 8, 8)))
    m.result(m.relu(m.conv(x, 4, compressed=True)))
    return m.xml(), bytes(m.bin)


FUZZ_SEEDS = os.path.join(HERE, "..", "fuzz", "seeds", "openvino_import")


def save_ir(name, xml, bin_data):
    """models/<name>.xml [+ .bin], and the IR fuzz target's seed (the .xml, a NUL, the .bin)."""
    with open(os.path.join(OUT, name + ".xml"), "w") as f:
        f.write(xml)
    if bin_data is not None:
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(bin_data)
    os.makedirs(FUZZ_SEEDS, exist_ok=True)
    with open(os.path.join(FUZZ_SEEDS, name), "wb") as f:
        f.write(xml.encode() + (b"\0" + bin_data if bin_data is not None else b""))


def openvino_cases():
    """The IR reader's bad inputs (cases ir_*): each names the layer and the problem."""
    xml, bin_data = ir_conv_block()
    save_ir("ir_valid", xml, bin_data)
    save_ir("ir_malformed_xml", xml.replace("</layers>", "", 1), bin_data)
    save_ir("ir_truncated_xml", xml[:len(xml) // 2], bin_data)
    save_ir("ir_missing_bin", xml, None)
    save_ir("ir_short_bin", xml, bin_data[:len(bin_data) // 2])
    save_ir("ir_const_offset_past_end", xml.replace('offset="0"', 'offset="1099511627776"', 1),
            bin_data)
    save_ir("ir_unknown_op", xml.replace('type="ReLU"', 'type="Mish"'), bin_data)
    save_ir("ir_unknown_version", xml.replace('type="ReLU" version="opset1"',
                                              'type="ReLU" version="opset99"'), bin_data)
    save_ir("ir_edge_missing_layer", xml.replace('to-layer="5"', 'to-layer="500"', 1), bin_data)
    save_ir("ir_edge_missing_port", xml.replace('from-port="5"', 'from-port="42"', 1), bin_data)
    save_ir("ir_fq_levels_1", xml.replace('levels="256"', 'levels="1"'), bin_data)
    # The ReLU (the last layer before the Result) feeds the first FakeQuantize.
    save_ir("ir_cycle", xml.replace('<edge from-layer="0" from-port="0" to-layer="5" to-port="0" />',
                                    '<edge from-layer="13" from-port="1" to-layer="5" to-port="0" />'),
            bin_data)
    # input_low and input_high of the FakeQuantize swapped: inverted limits.
    save_ir("ir_fq_inverted_limits",
            xml.replace('from-layer="1" from-port="0" to-layer="5" to-port="1"', "SWAP")
               .replace('from-layer="2" from-port="0" to-layer="5" to-port="2"',
                        'from-layer="1" from-port="0" to-layer="5" to-port="2"')
               .replace("SWAP", 'from-layer="2" from-port="0" to-layer="5" to-port="1"'),
            bin_data)


if __name__ == "__main__":
    main()
