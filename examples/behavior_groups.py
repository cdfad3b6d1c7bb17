"""How full a behavior evaluation's groups are (docs/measurements.md, "Issue 32: what a behavior evaluation's batch
can still gain"): the campaign's suite (chat-v3) rendered with an exported model's chat template, grouped as the
evaluation groups it (``evaluate.batches``: one prompt length a group, at most BATCH cases).

Usage: .venv/bin/python examples/behavior_groups.py EXPORT_DIR [BATCH]   (EXPORT_DIR: a folder with the tokenizer)"""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformers import AutoTokenizer  # noqa: E402

from harness.behavior import evaluate, suite as suites  # noqa: E402

tok = AutoTokenizer.from_pretrained(sys.argv[1])
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16


def render(messages):
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return out["input_ids"] if hasattr(out, "keys") else out


rendered = suites.render(suites.load(Path(__file__).resolve().parents[1] / "harness/behavior/chat-v3.toml"), render,
                         8192, "groups")
groups = evaluate.batches(rendered.cases, batch)
sizes = [len(g) for g in groups]
lengths = [len(c.prompt_ids) for c in rendered.cases]
print(f"{len(rendered.cases)} cases, {len(set(lengths))} prompt lengths ({min(lengths)}-{max(lengths)} tokens), "
      f"{len(groups)} groups of at most {batch}: mean {sum(sizes) / len(groups):.2f} cases, "
      f"{sizes.count(batch)} full; sizes {sorted(collections.Counter(sizes).items())}")
print(f"the fewest groups any grouping could make: {-(-len(rendered.cases) // batch)}")
