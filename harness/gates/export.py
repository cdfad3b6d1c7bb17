"""Each export is in the transformers.js layout, with export.json listing every file's SHA-256."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..domain import GRAPH_FILES
from ..verdict import Verdict
from .spec import Evidence, GateSpec, NoPolicy

REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class ExportEvidence(Evidence):
    record: Mapping[str, Any]               # export.json
    files: Mapping[str, str | None]         # relative path -> SHA-256 on disk, None when absent


def decide(evidence: ExportEvidence, policy: NoPolicy) -> Verdict:
    record, files = evidence.record, evidence.files
    reasons = []
    for rel in GRAPH_FILES.values():
        listed = record.get("files", {}).get(rel, {}).get("sha256")
        if files.get(rel) is None:
            reasons.append(f"{rel}: missing from the export")
        elif listed != files[rel]:
            reasons.append(f"{rel}: export.json lists SHA-256 {str(listed)[:12]}, the file has {files[rel][:12]}")
    reasons += [f"{name}: missing from the export" for name in REQUIRED_FILES if files.get(name) is None]
    inputs, outputs = record.get("inputs", []), record.get("outputs", [])
    if inputs[:3] != ["input_ids", "attention_mask", "position_ids"]:
        reasons.append(f"inputs {inputs[:3]} are not input_ids, attention_mask, position_ids (transformers.js names)")
    if not outputs or outputs[0] != "logits" or not all(o.startswith("present.") for o in outputs[1:]):
        reasons.append(f"outputs {outputs[:3]}... are not logits then present.* (transformers.js names)")
    return Verdict.from_checks(reasons)


SPEC = GateSpec(name="export", level="run", applies_to=(), policy=NoPolicy, evidence=ExportEvidence, decide=decide,
                describe="every export in the transformers.js layout with export.json (each file's SHA-256 and bytes)")
