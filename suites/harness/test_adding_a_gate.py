"""Adding a gate is one module (spec, evidence type, policy, rule, section) plus one test file.

The worked example of docs/adding-a-gate.md (``suites/harness/toygate/``) is dropped, unchanged, into a gate
package (discovered with no registry edit) and into a pytest project (registered by its conftest, as a project
outside this checkout does), then run: the campaign's ``[policy.toy_ratio]`` is parsed and checked at load, each
variant gets a receipt with the gate's figure, and the report shows the gate's section and verdicts.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

from harness import gates

TOY = Path(__file__).with_name("toygate")


def test_a_gate_module_in_a_gate_package_is_discovered_without_a_registry_edit(tmp_path, monkeypatch):
    pkg = tmp_path / "toy_gates"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(TOY / "toy_ratio.py", pkg / "toy_ratio.py")
    (pkg / "helper.py").write_text("X = 1\n")              # a module with no SPEC is not a gate
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = gates.discover("toy_gates", [str(pkg)])
        assert [s.name for s in found] == ["toy_ratio"]
        spec = found[0]
        assert spec.evidence.__name__ == "RatioEvidence" and [f.name for f in spec.figures] == ["ratio"]
        shutil.copy(TOY / "toy_ratio.py", pkg / "toy_ratio_copy.py")
        with pytest.raises(ValueError, match="toy_ratio"):
            gates.discover("toy_gates", [str(pkg)])
    finally:
        for name in [m for m in sys.modules if m == "toy_gates" or m.startswith("toy_gates.")]:
            del sys.modules[name]


CONFTEST = '''
from harness import gates
import toy_ratio

gates.register(toy_ratio.SPEC)
'''


def _project(gate_sandbox, tmp_path, monkeypatch, policy_line: str):
    pt = gate_sandbox((TOY / "test_toy_ratio.py").read_text(), CONFTEST)
    shutil.copy(TOY / "toy_ratio.py", pt.path / "toy_ratio.py")
    campaign = pt.path / "campaign.toml"
    campaign.write_text(campaign.read_text() + f"\n[policy.toy_ratio]\n{policy_line}\n")
    art = tmp_path / "graph.onnx"
    art.write_bytes(b"graph-bytes")
    monkeypatch.setenv("TOY_ARTIFACT", str(art))
    return pt


def test_the_toy_gate_runs_end_to_end_with_its_policy_receipts_and_report_section(gate_sandbox, tmp_path,
                                                                                   monkeypatch):
    pt = _project(gate_sandbox, tmp_path, monkeypatch, "max_ratio = 0.5")
    run_dir = tmp_path / "run"
    result = pt.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(run_dir), "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    receipts = {json.loads(p.read_text())["variant"]["dtype"]: json.loads(p.read_text())
                for p in (run_dir / "receipts").glob("*.json")}
    assert receipts["fp32"]["verdict"]["outcome"] == "pass" and receipts["q4"]["verdict"]["outcome"] == "fail"
    assert receipts["q4"]["measurements"]["ratio"]["value"] == 0.75
    assert receipts["q4"]["policy"] == {"max_ratio": 0.5}
    assert "above max_ratio 0.5" in receipts["q4"]["verdict"]["reasons"][0]
    report = (run_dir / "report.md").read_text()
    assert "## Toy ratio" in report and "| 0.75 | fail |" in report.replace("  ", " ")


def test_a_bad_toy_policy_value_is_refused_at_load_naming_file_field_and_value(gate_sandbox, tmp_path, monkeypatch):
    pt = _project(gate_sandbox, tmp_path, monkeypatch, "max_ratio = 2.0")
    result = pt.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(tmp_path / "run"))
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "campaign.toml: policy.toy_ratio.max_ratio: must be <= 1.0, got 2.0" in out, out[-2000:]
