"""Writes the weight products of an ONNX decoder alone: every MatMulNBits node of <model.onnx>, each
fed by a graph input x<K> [1, 1, K] of its own width, each output a graph output. bench/floor.ts
times it beside kiln's floor graph (onnxruntime-genai's int4 / int8 builds keep their weights in
MatMulNBits, as kiln's do). The external weights file is copied next to <out.onnx> (onnxruntime
refuses external data outside the model's folder).

usage: matmul_floor.py <model.onnx> <out.onnx>
"""
import os
import shutil
import sys

import onnx
from onnx import TensorProto, helper


def main(src: str, out: str) -> None:
    model = onnx.load(src, load_external_data=False)
    graph = model.graph
    products = [n for n in graph.node if n.op_type == "MatMulNBits"]
    widths, outputs = set(), []
    for node in products:
        attrs = {a.name: a.i for a in node.attribute}
        widths.add(attrs["K"])
        node.input[0] = f"x{attrs['K']}"
        outputs.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, [1, 1, attrs["N"]]))
    used = {i for n in products for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:]
    graph.node.extend(products)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.input[:]
    graph.input.extend(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [1, 1, k]) for k in sorted(widths))
    del graph.output[:]
    graph.output.extend(outputs)
    del graph.value_info[:]
    data = {e.value for t in kept for e in t.external_data if e.key == "location"}
    for name in data:
        shutil.copyfile(os.path.join(os.path.dirname(src), name), os.path.join(os.path.dirname(out), name))
    onnx.save(model, out)
    print(len(products))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
