"""A streaming profile, validated on construction, and the protocol arithmetic it implies."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError

SAMPLE_RATE = 16_000
FRAME_SAMPLES = 320  # 20 ms
FRAMES_PER_TOKEN = 4
SAMPLES_PER_TOKEN = FRAME_SAMPLES * FRAMES_PER_TOKEN  # 1280 samples = 80 ms
TOKEN_PERIOD_MS = 80
TOKEN_PERIOD_SECONDS = TOKEN_PERIOD_MS / 1000
STARTUP_POLICIES = ("realtime", "hf")
DELAYS_MS = (80, 160, 240, 480)
BATCHES = (1, 2, 4)
INPUT_FORMAT = "mono_16000_f32le"


class ProfileError(HarnessError):
    """A streaming profile field is missing, of the wrong type, or out of range."""


def _integer(name: str, value, low: int | None = None) -> int:
    if type(value) is not int:
        raise ProfileError(f"profile field {name}: expected an integer, got {value!r}")
    if low is not None and value < low:
        raise ProfileError(f"profile field {name}: {value} is below {low}")
    return value


@dataclass(frozen=True)
class StreamProfile:
    """What a streaming engine is asked to run, and everything the validator derives from it.

    Positions are counted in 80 ms tokens.  The stream starts with ``left_pad_tokens``
    silent positions; audio slot ``a`` is position ``left_pad_tokens + a``.  The first
    window prefills ``startup_tokens`` positions at once ("realtime": the pad and the
    first audio token; "hf": also ``delay_tokens`` more, so the first output already
    carries its delayed label).  Every later window consumes one position and emits
    one token.  After the end of input the engine appends ``delay_tokens +
    eof_drain_tokens`` silent positions so that the last word's delayed label is emitted.
    """

    name: str
    startup: str
    delay_ms: int
    batch: int
    context_tokens: int
    trim_tokens: int
    stable_prefix_tokens: int = 16
    left_pad_tokens: int = 16
    eof_drain_tokens: int = 2
    first_batch: int = 1

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ProfileError(f"profile field name: expected a non-empty string, got {self.name!r}")
        if self.startup not in STARTUP_POLICIES:
            raise ProfileError(f"profile {self.name} field startup: {self.startup!r} is not one of {STARTUP_POLICIES}")
        if _integer("delay_ms", self.delay_ms) not in DELAYS_MS:
            raise ProfileError(f"profile {self.name} field delay_ms: {self.delay_ms} is not one of {DELAYS_MS}")
        if _integer("batch", self.batch) not in BATCHES:
            raise ProfileError(f"profile {self.name} field batch: {self.batch} is not one of {BATCHES}")
        if _integer("first_batch", self.first_batch) != 1:
            raise ProfileError(f"profile {self.name} field first_batch: {self.first_batch}; startup requires 1")
        _integer("trim_tokens", self.trim_tokens, 1)
        _integer("stable_prefix_tokens", self.stable_prefix_tokens, 0)
        _integer("left_pad_tokens", self.left_pad_tokens, 0)
        _integer("eof_drain_tokens", self.eof_drain_tokens, 1)
        _integer("context_tokens", self.context_tokens, 1)
        if self.stable_prefix_tokens > self.startup_tokens:
            raise ProfileError(
                f"profile {self.name} field stable_prefix_tokens: {self.stable_prefix_tokens} exceeds the "
                f"{self.startup_tokens} startup tokens, so the stable prefix would hold audio")
        need = self.startup_tokens + self.stable_prefix_tokens + self.trim_tokens
        if self.context_tokens < need:
            raise ProfileError(
                f"profile {self.name} field context_tokens: {self.context_tokens} is below startup + stable prefix "
                f"+ trim = {need}")

    @classmethod
    def from_mapping(cls, name: str, data: dict, source: str = "<profile>") -> "StreamProfile":
        fields = set(cls.__dataclass_fields__) - {"name"}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ProfileError(f"{source}: profile {name} has unknown fields {unknown}")
        try:
            return cls(name=name, **data)
        except TypeError as e:
            raise ProfileError(f"{source}: profile {name}: {e}") from None

    @property
    def delay_tokens(self) -> int:
        return self.delay_ms // TOKEN_PERIOD_MS

    @property
    def startup_tokens(self) -> int:
        extra = self.delay_tokens if self.startup == "hf" else 0
        return self.left_pad_tokens + 1 + extra

    @property
    def right_pad_tokens(self) -> int:
        return self.delay_tokens + self.eof_drain_tokens

    @property
    def startup_policy(self) -> str:
        return "hf_delayed" if self.startup == "hf" else "realtime_first_token"

    def as_dict(self) -> dict:
        return {
            "name": self.name, "startup": self.startup, "delay_ms": self.delay_ms, "batch": self.batch,
            "context_tokens": self.context_tokens, "trim_tokens": self.trim_tokens,
            "stable_prefix_tokens": self.stable_prefix_tokens, "left_pad_tokens": self.left_pad_tokens,
            "eof_drain_tokens": self.eof_drain_tokens, "first_batch": self.first_batch,
            "delay_tokens": self.delay_tokens, "startup_tokens": self.startup_tokens,
        }

    def engine_args(self) -> list[str]:
        """The engine's command-line flags for this profile."""
        return ["--startup", self.startup, "--delay-ms", str(self.delay_ms), "--batch", str(self.batch),
                "--context", str(self.context_tokens), "--trim", str(self.trim_tokens),
                "--stable-prefix", str(self.stable_prefix_tokens)]


def audio_tokens(samples: int) -> int:
    """Audio slots the input occupies; a partial last slot is padded with silence."""
    _integer("samples", samples, 1)
    return -(-samples // SAMPLES_PER_TOKEN)


def emission_count(samples: int, profile: StreamProfile) -> int:
    """Windows (emitted tokens) for ``samples`` of input: every position from the startup one on."""
    positions = profile.left_pad_tokens + audio_tokens(samples) + profile.right_pad_tokens
    return positions - profile.startup_tokens + 1


def source_end_samples(index: int, profile: StreamProfile) -> int:
    """Input samples window ``index`` depends on: through the end of its audio slot."""
    _integer("window index", index, 0)
    return (profile.startup_tokens - profile.left_pad_tokens + index) * SAMPLES_PER_TOKEN


def needs_eof(index: int, samples: int, profile: StreamProfile) -> bool:
    """Whether window ``index`` can only be computed once the end of input is known."""
    return source_end_samples(index, profile) > samples


def source_deadline_seconds(index: int, samples: int, profile: StreamProfile) -> float:
    """When window ``index``'s source audio is complete on the audio clock (real-time arrival)."""
    return min(samples, source_end_samples(index, profile)) / SAMPLE_RATE


def batch_bounds(count: int, profile: StreamProfile) -> list[tuple[int, int]]:
    """``[start, end)`` of every batch: the first holds ``first_batch`` windows, then ``batch`` each."""
    _integer("window count", count, 1)
    bounds, start = [], 0
    while start < count:
        size = profile.first_batch if start == 0 else profile.batch
        end = min(start + size, count)
        bounds.append((start, end))
        start = end
    return bounds
