"""Behavior parity: a versioned scenario suite, deterministic checkers, greedy and seeded-sampled
generation over any backend, and behavior reports with integer rate counts."""

from pathlib import Path

DEFAULT_SUITE = Path(__file__).with_name("chat-v3.toml")
