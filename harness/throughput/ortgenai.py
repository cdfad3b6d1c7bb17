"""ORT-GenAI's own export of a Hugging Face directory (onnxruntime_genai.models.builder), built as an
artifact, and what the probe needs to know to run its graph."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ArtifactError

GRAPH = "model.onnx"
DEFAULT_PARAMS = {"precision": "int4", "execution_provider": "cpu"}
# Per peer kind (harness.domain.PEERS): the builder's options. "ort-genai-int4" is the builder's default int4
# build; "ort-genai-kquant" its best documented quality settings in onnxruntime-genai 0.18 (k-quant rounding and
# the last MatMul, the head, in int8). The builder's older int4_* option names are silently ignored by 0.18.
BUILDS = {"ort-genai-int4": DEFAULT_PARAMS,
          "ort-genai-kquant": {**DEFAULT_PARAMS,
                               "extra_options": ["algo_config=k_quant", "matmul_mixed_precision=last_matmul:int8"]}}


def version() -> str:
    import onnxruntime_genai as og

    return og.__version__


def builder_env() -> dict[str, str]:
    """The builder's environment, without a git repository to find. onnxruntime-genai 0.18 stamps each graph's
    ``producer_version`` with ``git rev-parse HEAD`` run five folders above its own module, which for a virtual
    environment inside a checkout is the checkout's commit: the same build of the same inputs then gave other
    bytes at every commit of this repository (found on a second host, 2026-12-05). Without git it stamps the
    wheel's own ``__commit__``."""
    import os

    return {**os.environ, "GIT_DIR": os.devnull}


def build(hf_dir: Path, out: Path, params: dict[str, Any], progress=lambda s: None) -> dict[str, Any]:
    """Run the builder (``-p int4 -e cpu``, its defaults otherwise) from ``hf_dir`` into ``out``."""
    with tempfile.TemporaryDirectory(prefix="ortgenai-cache-") as cache:
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out),
               "-p", params["precision"], "-e", params["execution_provider"], "-c", cache]
        if params.get("extra_options"):
            cmd += ["--extra_options", *params["extra_options"]]
        progress("ORT-GenAI builder: " + " ".join(cmd[2:]))
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=builder_env())
    (out / "builder.log").write_text(result.stdout[-20000:] + result.stderr[-20000:])
    if result.returncode != 0 or not (out / GRAPH).is_file():
        raise ArtifactError(f"onnxruntime_genai.models.builder on {hf_dir} failed (status {result.returncode}): "
                            f"{result.stderr[-3000:]}")
    return {"command": [c for c in cmd[1:] if c != cache and c != "-c"], "onnxruntime_genai": version()}


def probe_options(model_dir: Path) -> dict[str, Any]:
    """KV mode and cache dims for the probe from the built genai_config.json."""
    path = Path(model_dir) / "genai_config.json"
    try:
        cfg = json.loads(path.read_text())
        dec = cfg["model"]["decoder"]
        return {"kv": "share" if cfg["search"].get("past_present_share_buffer") else "concat",
                "kv_heads": int(dec["num_key_value_heads"]), "head_dim": int(dec["head_size"]),
                "context_length": int(cfg["model"]["context_length"])}
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{path}: cannot read the decoder's cache layout: {exc}") from exc


def graph_io(model_dir: Path) -> dict[str, Any]:
    """Input and output names of the built graph (without loading weights), for the report on whether
    harness.runtime.OrtDecoder could run it."""
    import onnx

    m = onnx.load(str(Path(model_dir) / GRAPH), load_external_data=False)
    return {"inputs": [i.name for i in m.graph.input], "outputs": [o.name for o in m.graph.output],
            "ops": sorted({n.op_type for n in m.graph.node})}
