"""The worked CI example (examples/github-actions/gatehouse-shards.yml): a matrix of shards and a merge job,
checked against the GitHub workflow schema check-jsonschema vendors (installed from the registry, no network)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "github-actions" / "gatehouse-shards.yml"


def _lint(path: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("check-jsonschema")
    return subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_the_example_workflow_passes_the_workflow_schema(tmp_path):
    ok = _lint(EXAMPLE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"   # the linter is not a rubber stamp: a misspelt key fails it
    broken.write_text(EXAMPLE.read_text().replace("runs-on:", "runs_on:", 1))
    bad = _lint(broken)
    assert bad.returncode != 0 and "runs_on" in bad.stdout + bad.stderr


def test_the_matrix_the_shard_count_and_the_merged_directories_agree():
    text = EXAMPLE.read_text()
    [matrix] = re.findall(r"shard: \[([0-9, ]+)\]", text)
    shards = [int(x) for x in matrix.split(",")]
    counts = {int(n) for n in re.findall(r"--shard \$\{\{ matrix\.shard \}\}/(\d+)", text)}
    merged = sorted(int(k) for k in re.findall(r"runs/gatehouse-shard-(\d+)", text))
    assert shards == list(range(1, len(shards) + 1)) and counts == {len(shards)} and merged == shards
    # the durations the merge job keeps are the ones every shard of the next run restores and splits by
    [kept] = re.findall(r"python -m harness\.shard runs/merged --out (\S+)", text)
    assert f"--shard-durations {kept}" in text and text.count(f"path: {kept}") == 2
