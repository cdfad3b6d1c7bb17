"""Quantization recipes: campaign data that makes a variant of a model (``[[recipes]]``).

A recipe names how a model's linear layers become MatMulNBits weights: bits, block size, symmetry,
accuracy level, the output head's precision and the rounding method. Each recipe is a variant of every
model it names, with its own id as the dtype label; its ``policy_dtype`` (``q4`` or ``q8`` by its bits)
is the dtype whose policy limits hold it, as a peer graph is held to the dtype it declares. Unlike a
peer, a recipe is Gatehouse's own export and may be qualified.

Import-free (the campaign loader validates recipes without importing numpy, torch or onnxruntime); the
build is ``harness/export/recipes.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import fields
from .fields import Where

# rtn: round to nearest (block min/max, the range widened to hold 0 so the zero point is exact), with
#      bias correction when asked;
# lattice: the GGUF lattices written exactly (Q4_1 codes + a block-sum offset term, Q8_0 codes), rtn for
#      weights on no lattice (what the campaign's fixed q4 does);
# lattice-zp: a GGUF Q4_1 block's own codes and scale with the nearest integer zero point (no offset term: a
#      block keeps a constant shift of at most half a step, whose mean effect bias correction adds back); weights
#      on no lattice are rounded to nearest;
# lsq: per block, the scale (and integer zero point) minimizing the activation-weighted squared error
#      sum_k E[x_k^2] (w_k - s (q_k - z))^2, searched over candidate ranges, the codes re-rounded each time;
# gptq: GPTQ-style error feedback: columns quantized in order, each column's error spread over the columns
#      not yet quantized through the inverse of the calibration Hessian E[x x^T] (scales per block from lsq);
# ort-rtn, ort-kquant, ort-hqq: ONNX Runtime's own weight-only quantizers
#      (onnxruntime.quantization.matmul_nbits_quantizer) on the fp32 graph's linear layers.
# Calibration statistics for bias correction, lsq and gptq come from the campaign's training corpus only.
METHODS = ("rtn", "lattice", "lattice-zp", "lsq", "gptq", "ort-rtn", "ort-kquant", "ort-hqq")
CALIBRATED = ("lsq", "gptq")          # need E[x x^T] (lsq its diagonal) on the training text
ORT_METHODS = ("ort-rtn", "ort-kquant", "ort-hqq")
HEADS = ("fp32", "q8", "q4")
BITS = (4, 8)
BLOCKS = (16, 32, 64, 128)
KEYS = {"id", "models", "bits", "block_size", "symmetric", "accuracy_level", "head", "head_accuracy_level",
        "method", "bias_correction", "damp", "delivery", "description"}
# delivery "graph": the MatMulNBits graph is what ships and runs. "packed": the weights ship small (the recipe's
# codes, scales and offsets in pack.bin; the embedding as 8-bit codes) beside an fp32 graph without weights, and
# are expanded once at load into that graph's external data (harness/export/packed.py, web/ort-bench.js): the
# browser downloads the packed size and runs fp32 kernels; natively the expanded fp32 graph runs. The graph the
# gates judge is exactly the expanded one (the page checks the expansion's SHA-256 against it).
DELIVERIES = ("graph", "packed")
PACKED_METHODS = ("lattice", "rtn")


@dataclass(frozen=True)
class Recipe:
    id: str
    bits: int = 4
    block_size: int = 32
    symmetric: bool = False
    accuracy_level: int = 4
    head: str = "q8"
    head_accuracy_level: int | None = None
    method: str = "rtn"
    bias_correction: bool = False
    damp: float = 0.01                 # gptq: the Hessian's diagonal dampening, as a fraction of its mean
    models: tuple[str, ...] | None = None   # None: every model of the campaign with weights
    description: str = ""
    delivery: str = "graph"

    @property
    def policy_dtype(self) -> str:
        return "q4" if self.bits == 4 else "q8"

    @property
    def calibrated(self) -> bool:
        return self.method in CALIBRATED or self.bias_correction

    def build_params(self) -> dict[str, Any]:
        """What the graph depends on (the artifact key): every field but the id, models and description."""
        d = asdict(self)
        for k in ("id", "models", "description"):
            d.pop(k)
        if self.delivery == "graph":   # the key of every graph recipe built before packed delivery existed
            d.pop("delivery")
        return d

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = list(self.models) if self.models is not None else None
        d["policy_dtype"] = self.policy_dtype
        return d

    def expected_cost(self) -> tuple:
        """The search order's key, cheapest decode step first (an estimate from the kernels' measured
        costs, DEVELOPERS.md "Facts for quantization recipes"): int8 activations first, fewer weight bits,
        no block-sum offset term (lattice adds four nodes per linear, about 23 % of a step), a smaller head."""
        from .export.params import HEAD_BITS

        head_bits = HEAD_BITS[self.head]
        return (self.delivery == "packed", self.accuracy_level != 4, self.bits, self.method == "lattice", head_bits,
                -self.block_size, self.id)


def parse(raw: Any, where: Where, model_ids: tuple[str, ...], reserved: tuple[str, ...]) -> tuple[Recipe, ...]:
    """``[[recipes]]``: a list of tables, each checked field by field (errors name file, field and value)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise where.fail("expected a list of [[recipes]] tables")
    out: list[Recipe] = []
    for i, table in enumerate(raw):
        w = where.child(i)
        fields.table(w, table, KEYS, required=("id", "bits", "method"))
        rid = fields.text(w.child("id"), table["id"])
        if not all(c.isalnum() or c in "-_." for c in rid):
            raise w.child("id").fail(f"expected letters, digits, '-', '_' or '.', got {rid!r}")
        if rid in reserved:
            raise w.child("id").fail(f"{rid!r} is a built-in dtype or peer label (reserved: {', '.join(reserved)})")
        if any(r.id == rid for r in out):
            raise w.child("id").fail(f"duplicated recipe id {rid!r}")
        w = Where(w.path, f"recipes[{rid}]")
        bits = fields.integer(w.child("bits"), table["bits"])
        if bits not in BITS:
            raise w.child("bits").fail(f"expected one of {', '.join(map(str, BITS))}, got {bits}")
        block = fields.integer(w.child("block_size"), table.get("block_size", 32))
        if block not in BLOCKS:
            raise w.child("block_size").fail(f"expected one of {', '.join(map(str, BLOCKS))}, got {block}")
        method = fields.text(w.child("method"), table["method"], METHODS)
        level = fields.integer(w.child("accuracy_level"), table.get("accuracy_level", 4))
        if level not in (0, 1, 2, 3, 4):
            raise w.child("accuracy_level").fail(f"expected an ONNX Runtime accuracy level 0..4, got {level}")
        head_level = table.get("head_accuracy_level")
        if head_level is not None:
            head_level = fields.integer(w.child("head_accuracy_level"), head_level)
            if head_level not in (0, 1, 2, 3, 4):
                raise w.child("head_accuracy_level").fail(f"expected an ONNX Runtime accuracy level 0..4, got {head_level}")
        head = fields.text(w.child("head"), table.get("head", "q8"), HEADS)
        symmetric = fields.boolean(w.child("symmetric"), table.get("symmetric", False))
        bias = fields.boolean(w.child("bias_correction"), table.get("bias_correction", False))
        damp = fields.number(w.child("damp"), table.get("damp", 0.01), minimum=0.0, maximum=1.0)
        if bits == 8 and level == 0:
            # measured: 8-bit MatMulNBits at level 0 takes 1.2 ms for a 576x1536 row against 25 us at level 4
            raise w.child("accuracy_level").fail("an 8-bit recipe needs accuracy_level 4: ONNX Runtime's 8-bit "
                                                 "MatMulNBits at level 0 runs 48x slower (DEVELOPERS.md)")
        if method in ORT_METHODS and bits != 4:
            raise w.child("method").fail(f"{method} writes 4-bit weights only (ONNX Runtime 1.32's quantizer; its "
                                         f"8-bit HQQ writes float zero points the CPU kernel refuses), got bits = {bits}")
        if method in ORT_METHODS and bias:
            raise w.child("bias_correction").fail(f"{method} is ONNX Runtime's own rounding: bias correction applies "
                                                  f"to rtn only")
        if method in ("lsq", "gptq", "lattice") and bias:
            raise w.child("bias_correction").fail(f"{method} sets its own rounding: bias correction applies to rtn "
                                                  f"and lattice-zp only")
        if method in ("lattice", "lattice-zp") and (bits != 4 or symmetric):
            raise w.child("method").fail(f"{method} writes asymmetric 4-bit GGUF Q4_1 blocks (bits = 4, "
                                         f"symmetric = false)")
        if head == "q4" and bits != 4:
            raise w.child("head").fail(f"a 4-bit head under {bits}-bit layers: use q8 or fp32")
        delivery = fields.text(w.child("delivery"), table.get("delivery", "graph"), DELIVERIES)
        if delivery == "packed" and method not in PACKED_METHODS:
            raise w.child("method").fail(f"packed delivery expands {', '.join(PACKED_METHODS)} weights in the page, "
                                         f"got {method!r}")
        if delivery == "packed" and bits != 4:
            raise w.child("bits").fail(f"packed delivery ships 4-bit linear weights, got bits = {bits}")
        models = table.get("models")
        if models is not None:
            models = fields.strings(w.child("models"), models, model_ids)
        description = table.get("description", "")
        if not isinstance(description, str):
            raise w.child("description").fail(f"expected a string, got {description!r}")
        out.append(Recipe(id=rid, bits=bits, block_size=block, symmetric=symmetric, accuracy_level=level, head=head,
                          head_accuracy_level=head_level, method=method, bias_correction=bias, damp=damp,
                          models=models, description=description, delivery=delivery))
    return tuple(out)


def from_dict(d: dict[str, Any]) -> Recipe:
    """A recipe back from a receipt's ``variant.recipe`` block."""
    d = {k: v for k, v in d.items() if k in Recipe.__dataclass_fields__}
    if d.get("models") is not None:
        d["models"] = tuple(d["models"])
    return Recipe(**d)
