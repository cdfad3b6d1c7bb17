"""One decode step's time against the number of rows it decodes, on one exported graph (docs/measurements.md,
"Issue 32: what a behavior evaluation's batch can still gain").

A behavior evaluation decodes a group of up to ``[policy.behavior] batch`` cases, each case's prompt as one row per
mode (two rows a case). This times ``OrtBackend.step_batch`` after a prefill of ROWS copies of one 45-token prompt:
3 unrecorded steps, then the mean of 12, per row count, with the graph's own thread count of the campaign (2).

Usage: .venv/bin/python examples/decode_rows_probe.py GRAPH.onnx [ROWS ...]   (default rows: 16 32 64 96)"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.behavior import generate  # noqa: E402
from harness.runtime import OrtDecoder  # noqa: E402

graph = sys.argv[1]
rows_list = [int(r) for r in sys.argv[2:]] or [16, 32, 64, 96]
decoder = OrtDecoder(graph, 2)
prompt = list(range(100, 145))
for rows in rows_list:
    backend = generate.OrtBackend(decoder)
    backend.start_batch([prompt] * rows)
    tokens = [5] * rows
    for _ in range(3):
        backend.step_batch(tokens)
    t0, steps = time.perf_counter(), 12
    for _ in range(steps):
        backend.step_batch(tokens)
    ms = (time.perf_counter() - t0) / steps * 1000
    print(f"{Path(graph).name} rows {rows}: {ms:.1f} ms a step, {ms / rows:.2f} ms a row", flush=True)
