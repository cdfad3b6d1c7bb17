"""The own-model path end to end, as a newcomer walks it (issue 35): ``bin/gatehouse campaign --model DIR --hf DIR``
on an ``onnx``-source export the suite builds from the CI model (its fp32 graph, and a q8 made by ONNX Runtime's
dynamic quantizer with its defaults, activations quantized at run time), run twice in child processes.

What it shows: the campaign written says only true things about an ONNX export (no ``[export]``, the graphs
found, no peers unless asked, fp32 alone in the browser); fp32's behavior is judged against PyTorch on the HF
weights given; the dynamic q8's cache is judged on its full-precision twin, saying so; every gate selected
writes a receipt and none errors for the tool's own reasons; skipped gates are never counted as failing; the
second run reuses every evaluation (behavior, the PyTorch reference, quantization: keyed by content, so an
``onnx`` source's are cached like Gatehouse's own); progress lines appear while it works.
The q8's verdicts on quality are not pinned: ONNX Runtime's u8 x s8 kernel rounds differently by CPU (VNNI or not).
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.domain import Variant

ROOT = Path(__file__).resolve().parents[2]
SELECT = "benchmark and (cache or quantization or behavior)"

# not exclusive: the child campaigns time nothing (cache, quantization, behavior) and take their own machine lock
pytestmark = [pytest.mark.ci, pytest.mark.slow]


@pytest.fixture(scope="module")
def ci_spec(campaign):
    return next(m for m in campaign.models if m.tier == "ci")


@pytest.fixture(scope="module")
def user_model(models, ci_spec, tmp_path_factory):
    """(export directory, HF directory): the CI model's fp32 export copied as a user's, q8 by quantize_dynamic."""
    import logging

    import onnx
    from onnxruntime.quantization import quantize_dynamic

    graph, _ = models.graph(Variant(ci_spec, "fp32"))
    d = tmp_path_factory.mktemp("own") / "my-export"
    (d / "onnx").mkdir(parents=True)
    for f in graph.parent.parent.iterdir():
        if f.is_file() and f.name not in ("artifact.json", "export.json"):
            shutil.copy2(f, d / f.name)
    shutil.copy2(graph, d / "onnx" / "model.onnx")
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(graph), str(d / "onnx" / "model_quantized.onnx"),
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return d, models.hf(ci_spec).path


def campaign_model(tmp_path: Path, export: Path, hf: Path, name: str, cases: int) -> tuple[int, list[tuple[float, str]], Path]:
    """Run ``bin/gatehouse campaign --model`` into ``tmp_path/name``: (exit code, timed output lines, run dir).

    With ``--cases`` at the CI model's slice: the export is the CI model's, so its fp32 graph and the PyTorch
    reference on the weights given are the evaluations the CI tier's own gates make (keyed by content, reused);
    the whole suite made this test's first run 161 s of behavior on a bare 2-core machine."""
    run_dir = tmp_path / name
    env = {**os.environ, "GATEHOUSE_RUN_DIR": str(run_dir), "GATEHOUSE_LOCK_DIR": str(tmp_path / "locks")}
    t0, lines = time.monotonic(), []
    proc = subprocess.Popen([str(ROOT / "bin" / "gatehouse"), "campaign", "--model", str(export), "--hf", str(hf),
                             "--cases", str(cases), "-m", SELECT, "-p", "no:cacheprovider"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    code = proc.wait(timeout=1200)
    return code, lines, run_dir


def receipts(run_dir: Path) -> dict:
    found = {}
    for f in sorted((run_dir / "receipts").glob("*.json")):
        r = json.loads(f.read_text())
        found[(r["gate"], r["variant"].get("dtype"))] = r
    return found


def test_campaign_model_on_a_users_onnx_export_with_dynamic_q8(tmp_path, user_model, ci_spec, campaign):
    export, hf = user_model
    ci_slice = campaign.policy["behavior"].slices[ci_spec.id]
    code, lines, run_dir = campaign_model(tmp_path, export, hf, "first", ci_slice)
    text = "\n".join(line for _, line in lines)
    assert code in (0, 1), text[-3000:]   # 1: a gate failed (the q8's quality is the CPU's); never a usage error

    written = Path(str(run_dir) + ".toml").read_text()
    assert 'source = "onnx"' in written and "\n[export]" not in written and 'browser = ["fp32"]' in written
    assert "graphs found: fp32 = onnx/model.onnx, q8 = onnx/model_quantized.onnx" in written
    assert "smollm2" not in written.lower() and "[[recipes]]" not in written
    assert f'slices = {{ "my-export" = {ci_slice} }}' in written

    first = receipts(run_dir)
    assert {k for k in first} == {("cache", "fp32"), ("cache", "q8"), ("quantization", "q8"), ("behavior", "fp32"),
                                  ("behavior", "q8")}, sorted(first)   # no ORT-GenAI peer: opt-in for an export
    assert not [k for k, r in first.items() if r["verdict"]["outcome"] == "error"], text[-3000:]
    # fp32 against PyTorch on the weights given; the dynamic q8's cache on its twin, saying what was found
    assert first[("behavior", "fp32")]["verdict"]["outcome"] == "pass"
    cache_q8 = first[("cache", "q8")]
    assert cache_q8["verdict"]["outcome"] == "pass", cache_q8["verdict"]
    assert cache_q8["extra"]["activation_quantization"]["twin"] is True, cache_q8["extra"]["activation_quantization"]
    # the terminal: never silent for long while it works (progress every stretch over 10 s; 30 s allows a loaded
    # machine). How many lines there are depends on what the artifact store already holds (evaluations are keyed by
    # content, so another test's evaluation of the same graph is reused; with every evaluation stored, the cache gate's
    # comparisons included, there is no build line at all), so it is the longest silence that is pinned.
    assert any(line.startswith("Gatehouse campaign:") for _, line in lines), text[-3000:]
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(lines, lines[1:])]
    longest = max(gaps)
    assert longest[0] < 30, f"{longest[0]:.1f} s silent before: {longest[1]}"

    code2, lines2, run2 = campaign_model(tmp_path, export, hf, "second", ci_slice)
    assert code2 == code, "\n".join(line for _, line in lines2)[-3000:]
    second = receipts(run2)
    assert {k: r["verdict"]["outcome"] for k, r in second.items()} == \
        {k: r["verdict"]["outcome"] for k, r in first.items()}
    assert second[("quantization", "q8")]["extra"]["evaluation_cached"] is True
    assert all(second[("cache", dtype)]["extra"]["evaluation_cached"] is True for dtype in ("fp32", "q8"))
    for dtype in ("fp32", "q8"):
        assert second[("behavior", dtype)]["behavior"]["evaluation_cached"] is True
    built = [line for _, line in lines2 if "building (not in the cache)" in line]   # the PyTorch reference too
    assert not built, built
