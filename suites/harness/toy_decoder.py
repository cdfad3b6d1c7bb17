"""A toy decoder graph for the suite's own tests of the native probe and the lanes: the probe's interface
(``input_ids``, ``attention_mask``, ``position_ids``, one layer of ``past_key_values.0.key/value`` ->
``present.0.*``) around a body the test chooses.

The skeleton computes ``x`` = embedding of the ids (initializer ``E``), ``x4`` = x unsqueezed (the step's cache
entry), ``present.0.key/value`` = past concatenated with ``x4`` and, with ``ctx=True``, ``ctx`` = the sum of all
cached keys; the body's nodes read those names and must write ``logits``."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np


def save(path: Path, tensors: Mapping[str, np.ndarray], body: Sequence, *, vocab: int, dim: int, name: str,
         ctx: bool = True, microsoft: bool = False) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = {**tensors, "axis1": np.asarray([1], np.int64), "axis2": np.asarray([2], np.int64)}
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["x"]), helper.make_node("Unsqueeze", ["x", "axis1"], ["x4"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, d]) for n, d in
              (("input_ids", "s"), ("attention_mask", "t"), ("position_ids", "s"))]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "s", vocab])]
    for kind in ("key", "value"):
        nodes.append(helper.make_node("Concat", [f"past_key_values.0.{kind}", "x4"], [f"present.0.{kind}"], axis=2))
        inputs.append(helper.make_tensor_value_info(f"past_key_values.0.{kind}", TensorProto.FLOAT, [1, 1, "p", dim]))
        outputs.append(helper.make_tensor_value_info(f"present.0.{kind}", TensorProto.FLOAT, [1, 1, "t", dim]))
    if ctx:
        nodes += [helper.make_node("ReduceSum", ["present.0.key", "axis2"], ["ctx4"], keepdims=1),
                  helper.make_node("Squeeze", ["ctx4", "axis1"], ["ctx"])]
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if microsoft else [])
    model = helper.make_model(helper.make_graph(nodes + list(body), name, inputs, outputs,
                                                [numpy_helper.from_array(v, k) for k, v in inits.items()]),
                              opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
