"""Each gate's rule: a pure function from recorded evidence and a policy to a Verdict.

``APPLICABLE`` says which dtypes each gate applies to; the report uses it to tell
a variant that passed everything from one that was never measured on a gate.
"""

APPLICABLE: dict[str, tuple[str, ...]] = {
    "cache": ("fp32", "q8", "q4"),
    "quantization": ("q8", "q4"),
    "behavior": ("fp32", "q8", "q4"),
    "throughput_native": ("fp32", "q8", "q4"),
    "throughput_browser": ("fp32", "q8", "q4"),
}
