"""What the streaming gate's results are not: the disclaimers every streaming receipt and report section carry.

A pass checks the streaming protocol and the engine's timing on the gate's own small speech model; it is
easy to read more into it.  The disclaimers say what it does not establish, once, here: the receipt notes
them (``scope``) and the report's streaming section prints them (``harness.gates.streaming.section``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from harness.streaming.release import FLAG, RECORD, RECORD_SHA

# (key, text): what a streaming result is not
DISCLAIMERS = (
    ("not_an_acceptance",
     "Not an acceptance of any model: no automatic quality or latency acceptance and no model selection is "
     "performed, and no production accuracy is approved. A pass says the engine kept the rolling-trim protocol "
     "(every event, clock, trim and batch), matched the PyTorch reference's token ids and met the tier's "
     "timing and memory limits on the gate's own small speech model trained on synthesized voices."),
    ("dev_is_screening",
     "Dev cases are screening, not qualification: they use a voice the model trained on, so their word error "
     "rate is reported and never held to the policy. Only held-out cases, run with " + FLAG + " against a "
     "release-candidate record pinned by SHA-256 ([policy.streaming] " + RECORD + " and " + RECORD_SHA + "), "
     "are the final evaluation, and then of that release candidate only."),
    ("not_microphone_latency",
     "Latency is measured from the engine's audio clock origin (the feeder starts after the host receives the "
     "engine's ready event) and per token from its source dependency: not microphone, speech-onset or aligned "
     "word latency. There is no microphone capture clock; the engine's and the host's clocks are recorded "
     "separately."),
    ("not_live_speech",
     "The input is speech synthesized by espeak-ng, read from a file and fed as raw mono 16 kHz float32 at the "
     "real pace: not a live microphone and not recorded human speech."),
)


def receipt_scope(role: str, decision: str) -> dict[str, Any]:
    """The receipt's ``scope`` note: the flags a reader checks first, this case's evaluation, the disclaimers."""
    return {"automatic_acceptance_performed": False, "production_accuracy_approved": False,
            "microphone_test": False,
            "evaluation": "final evaluation (held-out)" if role == "heldout" else "screening (dev)",
            "case_selection": decision, "not": dict(DISCLAIMERS)}


def heldout_status(rows: Iterable[Mapping[str, Any]]) -> str:
    """One line on the held-out cases (pure), from each streaming receipt's ``role``, ``outcome`` and the
    ``release_candidate`` its policy recorded.  A held-out receipt counts as run only with a release candidate
    and an outcome other than skip; a receipt without a role (an older one) counts as neither."""
    held = [r for r in rows if r.get("role") == "heldout"]
    ran = [r for r in held if r.get("outcome") not in ("skip", None) and r.get("release_candidate")]
    if not ran:
        other = f" {len(held)} held-out receipt(s) skipped or refused, reasons below." if held else ""
        return (f"**Held-out cases: not run.** These results are dev cases only (screening).{other} Held-out "
                f"cases run only with {FLAG} and a release-candidate record pinned by SHA-256 "
                f"([policy.streaming] {RECORD}, {RECORD_SHA}).")
    candidates = sorted({(r["release_candidate"].get("path"), r["release_candidate"].get("sha256")) for r in ran},
                        key=str)
    named = "; ".join(f"`{p}` (SHA-256 {s})" for p, s in candidates)
    return (f"**Held-out cases: {len(ran)} run** as the final evaluation of release candidate {named}; every other "
            f"row is a dev case (screening).")


def disclaimer_lines() -> list[str]:
    """The disclaimers as a Markdown list under their own heading line."""
    return ["**What these streaming results are not:**", "", *(f"- {text}" for _, text in DISCLAIMERS)]
