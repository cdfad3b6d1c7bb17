"""The behavior gate's published reference is paired inference of a pinned published graph, end to end.

The "published" reports are real behavior reports of the CI model, made by the suite's own machinery
(the cached evaluations the behavior gate itself uses): the fp32 graph's, the q4 graph's and the PyTorch
model's.  Pinned as the fp32 graph's publication, the fp32 report passes; the q4 report (another graph)
and the PyTorch report (not ONNX evidence) fail; copies of the fp32 report that record other threads,
another generation config or a repetition penalty (re-pinned by their new SHA-256, as a report made
with those settings would be) fail, each with its reason.  Two nested runs of the real gate test show
the ``published-paired-inference`` record in the receipt and its evidence folder.
"""

import copy
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import gates
from harness.behavior import evaluate
from harness.domain import Variant
from harness.errors import EvidenceError
from harness.behavior.rates import published_record
from harness.gates.behavior import Published
from harness.hashing import sha256_file, sha256_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ci(campaign, behavior, models):
    """The CI model's fp32 candidate, its PyTorch reference and q4 evaluation, and the fp32 graph's SHA-256."""
    spec = next(m for m in campaign.models if m.tier == "ci")
    fp32 = Variant(spec, "fp32")
    return {"spec": spec, "fp32": behavior.evaluate(fp32), "torch": behavior.evaluate(None, spec),
            "q4": behavior.evaluate(Variant(spec, "q4")), "graph_sha256": models.graph(fp32)[1]["sha256"]}


def publish(directory: Path, art, graph_sha256: str, edit=None) -> Published:
    """``art``'s report and transcripts copied into ``directory`` (the report edited by ``edit``), pinned."""
    directory.mkdir(parents=True)
    report = json.loads((art.path / "report.json").read_text())
    if edit:
        report = copy.deepcopy(report)
        edit(report)
        report["contract_sha256"] = sha256_json(report["contract"])
    (directory / "report.json").write_text(json.dumps(report, indent=1))
    (directory / "transcripts.jsonl").write_bytes((art.path / "transcripts.jsonl").read_bytes())
    path = directory / "report.json"
    return Published(str(path), sha256_file(path), graph_sha256)


def decide(behavior, campaign, ci, entry: Published):
    """What ``suites/test_behavior.py`` does for the fp32 graph with ``entry`` as its published reference."""
    policy = dataclasses.replace(campaign.policy["behavior"], published={ci["spec"].id: entry})
    (_, cand, cand_rows), (_, ref, ref_rows) = ci["fp32"], ci["torch"]
    found = evaluate.comparison(ref, ref_rows, cand, cand_rows, policy.agreement_tokens, tuple(cand["contract"]["modes"]))
    gate = gates.get("behavior")
    found = gate.evidence.pick(found, published=behavior.published(entry, cand, cand_rows, policy.agreement_tokens))
    verdict = gate.decide(found, policy)
    return verdict, published_record(verdict, entry.graph_sha256)


def _first_case(report):
    return sorted(report["max_new_tokens"])[0]


def _set(path, value):
    def edit(report):
        *head, last = path
        target = report
        for key in head:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return edit


# (case, which evaluation is published, how its report is edited, the reasons it must print)
CASES = [
    ("threads", "fp32", _set(("contract", "threads"), 1), ["threads differ: reference 1, candidate 2"]),
    ("threads-unrecorded", "fp32", _set(("contract", "threads"), None), ["reference records no thread count"]),
    ("top-k", "fp32", _set(("contract", "top_k"), 20), ["generation config top_k differs: reference 20, candidate 40"]),
    ("seed", "fp32", _set(("contract", "seed"), 7),
     ["generation config seed differs: reference 7, candidate 20261202"]),
    ("seed-strategy", "fp32", _set(("contract", "seed_strategy"), "one-stream-per-run"),
     ["generation config seed_strategy differs: reference 'one-stream-per-run', "
      "candidate 'per-case-pcg64(seed,crc32(case_id))-v1'"]),
    ("greedy-only", "fp32", _set(("contract", "modes"), ["greedy"]),
     ["generation config modes differs: reference ['greedy'], candidate ['greedy', 'sampled']"]),
    ("max-new-tokens", "fp32", lambda r: r["max_new_tokens"].__setitem__(_first_case(r), 5),
     ["generation config max_new_tokens differs in 1 case(s), first {case!r}: reference 5, candidate {budget}"]),
    ("repetition-penalty", "fp32", _set(("contract", "repetition_penalty"), 1.3),
     ["repetition penalty differs: reference 1.3, candidate 1.0"]),
]


@pytest.mark.ci
def test_the_published_graphs_own_report_passes(ci, behavior, campaign, tmp_path):
    verdict, record = decide(behavior, campaign, ci, publish(tmp_path / "pub", ci["fp32"][0], ci["graph_sha256"]))
    assert verdict.passed, verdict.render()
    assert record == {"kind": "published-paired-inference", "published_graph_sha256": ci["graph_sha256"],
                      "same_training_corpus_claim": False, "passed": True, "reasons": []}


@pytest.mark.ci
def test_a_report_of_another_graph_is_refused(ci, behavior, campaign, tmp_path):
    q4 = ci["q4"][1]["subject"]["graph_sha256"]
    verdict, record = decide(behavior, campaign, ci, publish(tmp_path / "pub", ci["q4"][0], ci["graph_sha256"]))
    print(verdict.render())
    assert not verdict.passed and not record["passed"]
    assert record["reasons"][0] == f"reference measured graph {q4[:12]}, not the pinned published graph " \
                                   f"{ci['graph_sha256'][:12]}"
    assert "published reference: " + record["reasons"][0] in verdict.render()


@pytest.mark.ci
def test_a_pytorch_report_is_not_onnx_evidence(ci, behavior, campaign, tmp_path):
    verdict, record = decide(behavior, campaign, ci, publish(tmp_path / "pub", ci["torch"][0], ci["graph_sha256"]))
    print(verdict.render())
    assert not verdict.passed
    assert record["reasons"][:2] == [
        "reference is not ONNX evidence: it measured a PyTorch model (subject kind 'torch')",
        f"reference records no graph SHA-256, so it did not measure the pinned published graph "
        f"{ci['graph_sha256'][:12]}"]


@pytest.mark.ci
@pytest.mark.parametrize("case, source, edit, expected", CASES, ids=[c[0] for c in CASES])
def test_unpaired_settings_are_each_named(case, source, edit, expected, ci, behavior, campaign, tmp_path):
    cand = ci["fp32"][1]
    first = _first_case(cand)
    expected = [e.format(case=first, budget=cand["max_new_tokens"][first]) for e in expected]
    verdict, record = decide(behavior, campaign, ci,
                             publish(tmp_path / "pub", ci[source][0], ci["graph_sha256"], edit))
    print(verdict.render())
    assert not verdict.passed and record["passed"] is False and record["same_training_corpus_claim"] is False
    assert record["reasons"][:len(expected)] == expected, record["reasons"]
    for reason in expected:
        assert f"  - published reference: {reason}" in verdict.render()


@pytest.mark.ci
def test_an_edited_published_report_is_refused_by_its_pin(ci, behavior, campaign, tmp_path):
    entry = publish(tmp_path / "pub", ci["fp32"][0], ci["graph_sha256"])
    Path(entry.report).write_text(Path(entry.report).read_text().replace('"threads": 2', '"threads": 1'))
    with pytest.raises(EvidenceError, match=r"report\.json: the published behavior report is missing or differs from "
                                        r"its pinned SHA-256"):
        decide(behavior, campaign, ci, entry)


def _campaign_with(entry: Published, model: str) -> str:
    text = (ROOT / "campaigns" / "default.toml").read_text().replace('suite = "../harness', f'suite = "{ROOT}/harness')
    return text + (f'\n[policy.behavior.published.{model}]\nreport = "{entry.report}"\nsha256 = "{entry.sha256}"\n'
                   f'graph_sha256 = "{entry.graph_sha256}"\n')


@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.parametrize("published", ["fp32", "q4"])
def test_the_gate_test_writes_the_paired_inference_record(published, ci, tmp_path):
    """The real gate test (fp32 graph of the CI model) with a published entry, in a nested run."""
    entry = publish(tmp_path / "pub", ci[published][0], ci["graph_sha256"])
    (tmp_path / "c.toml").write_text(_campaign_with(entry, ci["spec"].id))
    run = tmp_path / "run"
    env = {**os.environ, "GATEHOUSE_LOCK_DIR": str(tmp_path / "locks")}   # the outer run holds the machine lock
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "suites/test_behavior.py",
                          "-m", "ci", "-k", f"{ci['spec'].id} and fp32", "--campaign", str(tmp_path / "c.toml"),
                          "--run-dir", str(run)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    print(out.stdout[-3000:])
    [receipt] = [json.loads(p.read_text()) for p in (run / "receipts").glob("*.json")]
    record = receipt["extra"]["published_paired_inference"]
    [evidence] = list((run / "evidence").glob("*/published-paired-inference.json"))
    assert json.loads(evidence.read_text()) == record
    assert receipt["parameters"]["published_graph_sha256"] == ci["graph_sha256"]
    assert any(a["role"] == "published_behavior_report" and a["sha256"] == entry.sha256 for a in receipt["artifacts"])
    assert record["kind"] == "published-paired-inference" and record["same_training_corpus_claim"] is False
    if published == "fp32":
        assert out.returncode == 0 and receipt["verdict"]["outcome"] == "pass" and record["passed"]
    else:
        reason = f"reference measured graph {ci['q4'][1]['subject']['graph_sha256'][:12]}, not the pinned published " \
                 f"graph {ci['graph_sha256'][:12]}"
        assert out.returncode == 1 and receipt["verdict"]["outcome"] == "fail" and not record["passed"]
        assert record["reasons"][0] == reason
        assert "published reference: " + reason in receipt["verdict"]["reasons"]
        assert re.search(r"- published reference: " + re.escape(reason), out.stdout)
