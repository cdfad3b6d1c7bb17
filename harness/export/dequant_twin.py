"""The full-precision twin of a graph that quantizes its activations at run time (pure ONNX graph surgery).

ONNX Runtime's dynamic quantizer (``onnxruntime.quantization.quantize_dynamic``) writes each float MatMul as::

    X -> DynamicQuantizeLinear -> (Xq, Xs, Xzp)
    MatMulInteger(Xq, Wq, Xzp, Wzp) -> Cast(float) -> Mul(., Mul(Xs, Ws)) -> Y

(or, fused, ``MatMulIntegerToFloat`` after a DynamicQuantizeLinear, or ``DynamicQuantizeMatMul(X, Wq, Ws, Wzp)``).
A per-tensor activation scale depends on every row of the tensor, so a one-token decode step and a full
recompute round the same position differently. The twin replaces each such pattern by ``MatMul(X, W)`` with
``W = (Wq - Wzp) * Ws``, the int8 weights dequantized, and sets any MatMulNBits at accuracy level 4 (int8
activations) to level 0: the same weights, the same cache and every other node and initializer unchanged, with
no activation rounding. When a node that quantizes activations cannot be rewritten there is no twin, and
``why`` says which node and why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DYNAMIC_OPS = ("DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM")
INT8_MATMULNBITS = "MatMulNBits at accuracy level 4"


class NotRewritable(Exception):
    """A node that quantizes activations in a pattern this rewrite does not replace."""


@dataclass
class Twin:
    """What :func:`derive` found and made: ``model`` the twin (None when there is none), ``nodes`` the count of
    each kind of node that quantizes activations at run time, ``rewritten`` the integer matmuls replaced,
    ``why`` why there is no twin (None when there is one, or nothing to remove)."""

    model: Any = None
    nodes: dict[str, int] = field(default_factory=dict)
    rewritten: int = 0
    why: str | None = None

    def record(self) -> dict[str, Any]:
        """JSON-safe, for evidence: the counts, what was rewritten, and whether a twin was derived."""
        return {"nodes": dict(self.nodes), "rewritten": self.rewritten, "twin": self.model is not None,
                "why_no_twin": self.why}


def survey(model) -> dict[str, int]:
    """How many nodes of ``model`` quantize activations at run time, by kind (kinds it has none of omitted)."""
    found: Counter[str] = Counter()
    for node in model.graph.node:
        if node.op_type in DYNAMIC_OPS:
            found[node.op_type] += 1
        elif node.op_type == "MatMulNBits" and any(a.name == "accuracy_level" and a.i == 4 for a in node.attribute):
            found[INT8_MATMULNBITS] += 1
    return dict(found)


def derive(model) -> Twin:
    """The twin of ``model`` (an ``onnx.ModelProto``, left untouched): every run-time activation quantization
    removed (MatMulNBits at accuracy level 4 set to 0).

    ``Twin.model`` is None when the graph quantizes no activations at run time, or when one of its nodes
    cannot be rewritten (``why`` names it).
    """
    nodes = survey(model)
    if not nodes:
        return Twin()
    import onnx

    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    rewritten = 0
    if any(nodes.get(op) for op in DYNAMIC_OPS):
        try:
            rewritten = _Surgery(twin.graph).run()
        except NotRewritable as exc:
            return Twin(nodes=nodes, why=str(exc))
    for node in twin.graph.node:
        for attr in node.attribute:
            if node.op_type == "MatMulNBits" and attr.name == "accuracy_level" and attr.i == 4:
                attr.i = 0
    return Twin(model=twin, nodes=nodes, rewritten=rewritten)


class _Surgery:
    """One pass over a graph: every integer matmul fed by a run-time activation quantization becomes a float
    MatMul on its dequantized weight; the quantization nodes left without consumers go; nothing else moves."""

    def __init__(self, graph):
        self.g = graph
        self.nodes = list(graph.node)           # held for the whole pass: a node is known by its id()
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.removed: set[int] = set()          # id() of removed nodes
        self.placed: dict[int, list] = {}       # id() of a removed node -> the nodes that take its place
        self.weights: dict[tuple, str] = {}     # (Wq, Ws, Wzp) -> the dequantized weight's initializer
        self.new_inits: list = []
        self.maybe_dead: list = []              # the quantization and scale-product nodes of rewritten patterns

    def run(self) -> int:
        count = 0
        for node in self.nodes:
            if node.op_type in ("MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"):
                if node.op_type != "DynamicQuantizeMatMul" and not self._dynamic(node.input[0]):
                    continue   # static quantization (a QuantizeLinear input): not run-time rounding
                getattr(self, "_" + node.op_type)(node)
                count += 1
        self._drop_dead()
        left = [n for n in self.nodes if id(n) not in self.removed and n.op_type in DYNAMIC_OPS]
        if left:
            n = left[0]
            users = sorted({f"{u.op_type} '{u.name}'" for o in n.output for u in self.consumers.get(o, [])
                            if id(u) not in self.removed})
            if n.op_type != "DynamicQuantizeLinear" or not users:
                raise NotRewritable(f"{n.op_type} '{n.name}' is not a pattern this rewrite replaces")
            raise NotRewritable(f"{n.op_type} '{n.name}' feeds {', '.join(users)}, which this rewrite does not "
                                f"replace by a float MatMul")
        self._commit()
        return count

    # -- the patterns ------------------------------------------------------------------------------
    def _dynamic(self, name: str):
        src = self.producer.get(name)
        return src if src is not None and src.op_type == "DynamicQuantizeLinear" and src.output[0] == name else None

    def _MatMulInteger(self, node) -> None:
        """MatMulInteger(Xq, Wq, Xzp, Wzp) -> Cast(float) -> Mul(., Xs * Ws)."""
        dql = self._dynamic(node.input[0])
        if len(node.input) < 3 or node.input[2] != dql.output[2]:
            raise NotRewritable(f"MatMulInteger '{node.name}' does not take its activation zero point from "
                                f"DynamicQuantizeLinear '{dql.name}'")
        cast = self._only_consumer(node, "Cast")
        if not any(a.name == "to" and a.i == 1 for a in cast.attribute):
            raise NotRewritable(f"MatMulInteger '{node.name}' is cast by '{cast.name}' to another type than float")
        out = self._only_consumer(cast, "Mul")
        scales = self.producer.get(out.input[1] if out.input[0] == cast.output[0] else out.input[0])
        if scales is None or scales.op_type != "Mul" or dql.output[1] not in scales.input:
            raise NotRewritable(f"MatMulInteger '{node.name}': its output is not scaled by its activation's scale "
                                f"times the weight's (Mul '{out.name}')")
        w_scale = next(i for i in scales.input if i != dql.output[1]) if len(set(scales.input)) == 2 else None
        zp = node.input[3] if len(node.input) > 3 else ""
        self.maybe_dead += [dql, scales]
        self._replace(node, [node, cast, out], dql.input[0], (node.input[1], w_scale, zp), out.output[0])

    def _MatMulIntegerToFloat(self, node) -> None:
        """MatMulIntegerToFloat(Xq, Wq, Xs, Ws, Xzp, Wzp, bias) after a DynamicQuantizeLinear."""
        dql = self._dynamic(node.input[0])
        ins = list(node.input) + [""] * (7 - len(node.input))
        if ins[2] != dql.output[1] or ins[4] not in ("", dql.output[2]):
            raise NotRewritable(f"MatMulIntegerToFloat '{node.name}' does not take its activation scale and zero "
                                f"point from DynamicQuantizeLinear '{dql.name}'")
        self.maybe_dead.append(dql)
        self._replace(node, [node], dql.input[0], (ins[1], ins[3], ins[5]), node.output[0], bias=ins[6])

    def _DynamicQuantizeMatMul(self, node) -> None:
        """DynamicQuantizeMatMul(X, Wq, Ws, Wzp, bias)."""
        ins = list(node.input) + [""] * (5 - len(node.input))
        self._replace(node, [node], ins[0], (ins[1], ins[2], ins[3]), node.output[0], bias=ins[4])

    # -- the rewrite -------------------------------------------------------------------------------
    def _only_consumer(self, node, op: str):
        users = self.consumers.get(node.output[0], [])
        if len(users) != 1 or users[0].op_type != op or node.output[0] in self.outputs:
            found = ", ".join(f"{u.op_type} '{u.name}'" for u in users) or "nothing"
            raise NotRewritable(f"{node.op_type} '{node.name}' feeds {found}, not one {op}")
        return users[0]

    def _weight(self, owner, key: tuple) -> str:
        """The float initializer ``(Wq - Wzp) * Ws`` (one per distinct quantized weight, scale and zero point)."""
        from onnx import numpy_helper

        if key in self.weights:
            return self.weights[key]
        q, scale, zp = key
        missing = [n for n in (q, scale, zp) if n and n not in self.inits]
        if missing or not scale:
            raise NotRewritable(f"{owner.op_type} '{owner.name}': its weight, scale or zero point "
                                f"{missing[0] if missing else '(no scale)'!r} is not an initializer")
        w = numpy_helper.to_array(self.inits[q]).astype(np.float32)
        if zp:
            w = w - numpy_helper.to_array(self.inits[zp]).astype(np.float32)
        w = w * numpy_helper.to_array(self.inits[scale]).astype(np.float32)
        name = self._fresh(q.removesuffix("_quantized") + "_dequantized")
        self.new_inits.append(numpy_helper.from_array(np.ascontiguousarray(w, dtype=np.float32), name))
        self.weights[key] = name
        return name

    def _fresh(self, base: str) -> str:
        taken = set(self.inits) | set(self.producer) | {t.name for t in self.new_inits}
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        return name

    def _replace(self, anchor, gone: list, x: str, key: tuple, y: str, bias: str = "") -> None:
        """``gone`` nodes out; ``MatMul(x, W) (+ bias) -> y`` in at ``anchor``'s place."""
        from onnx import helper

        w = self._weight(anchor, key)
        name = self._fresh(anchor.name + "_dequantized") if anchor.name else ""
        if bias:
            mid = self._fresh(y + "_dequantized_matmul")
            new = [helper.make_node("MatMul", [x, w], [mid], name=name),
                   helper.make_node("Add", [mid, bias], [y], name=self._fresh(name + "_bias") if name else "")]
        else:
            new = [helper.make_node("MatMul", [x, w], [y], name=name)]
        for n in gone:
            self.removed.add(id(n))
        self.placed[id(anchor)] = new

    def _drop_dead(self) -> None:
        """Remove the patterns' quantization and scale-product nodes that now feed only removed nodes."""
        changed = True
        while changed:
            changed = False
            for n in self.maybe_dead:
                if id(n) in self.removed or any(o in self.outputs for o in n.output):
                    continue
                users = [u for o in n.output for u in self.consumers.get(o, [])]
                if users and all(id(u) in self.removed for u in users):
                    self.removed.add(id(n))
                    changed = True

    def _commit(self) -> None:
        kept = []
        for n in self.nodes:
            kept.extend(self.placed.get(id(n), []))
            if id(n) not in self.removed:
                kept.append(n)
        used = {i for n in kept for i in n.input} | self.outputs
        removed = [n for n in self.nodes if id(n) in self.removed]
        gone = {o for n in removed for o in n.output}
        read_by_removed = {i for n in removed for i in n.input}
        # an initializer goes only when a removed node read it and nothing left does
        inits = [t for t in self.g.initializer if t.name in used or t.name not in read_by_removed]
        value_info = [v for v in self.g.value_info if v.name not in gone or v.name in used]
        del self.g.node[:]
        self.g.node.extend(kept)
        del self.g.initializer[:]
        self.g.initializer.extend(inits + self.new_inits)
        del self.g.value_info[:]
        self.g.value_info.extend(value_info)
