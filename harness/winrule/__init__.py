"""The OFF/ON/OFF (A/B/A) win rule: registration, start records, paired statistic, drift, archive, decision.

A campaign measures three starts with any lane, builds one :class:`Start`
each, and calls :func:`decide`; the :class:`Decision` it returns is the
record (``as_dict()``), rendered by :func:`render_markdown` and
:func:`draw_chart`.  Control starts go to the archive with
:func:`control_rows` and :func:`append`.
"""

from .archive import ArchiveError, ArchiveRow, Definition, Spread, append, control_rows, day_to_day_spread, read
from .decision import INCONCLUSIVE, INVALID, Behavior, Decision, Look, Series
from .drift import Bound, DriftPolicy, DriftReport, check_drift
from .evidence import CANDIDATE, CONTROL, Start, StartRecordError, WaveInput
from .record import draw_chart, render_markdown
from .registration import Metric, Registration, RegistrationError
from .rule import decide, window_verdict
from .statistics import LOSS, STATISTIC, TIE, WIN, paired_verdict

__all__ = [
    "ArchiveError", "ArchiveRow", "Behavior", "Bound", "INVALID", "Look", "CANDIDATE", "CONTROL", "Decision", "Definition", "DriftPolicy",
    "DriftReport", "INCONCLUSIVE", "LOSS", "Metric", "Registration", "RegistrationError", "STATISTIC", "Series",
    "Spread", "Start", "StartRecordError", "TIE", "WIN", "WaveInput", "append", "check_drift", "control_rows",
    "day_to_day_spread", "decide", "draw_chart", "paired_verdict", "read", "render_markdown", "window_verdict",
]
