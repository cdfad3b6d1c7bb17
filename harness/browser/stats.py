"""Pure statistics of the browser lane: what one generation measured, pooled over repeats.

Decode rate excludes the first generated token (it belongs to prefill): a repeat of ``n`` tokens
stamped at ``t_1 .. t_n`` ms decodes ``n - 1`` tokens in ``t_n - t_1`` ms.  The pooled rate is total
decode tokens over total decode seconds (not a mean of rates, which overweights fast repeats).
"""

# The stamp figures, pooling, the bounded "more repeats" rule and greedy agreement are the native
# lane's, shared so that both lanes summarize a workload the same way.
from ..throughput.stats import agreement, needs_more, summarize  # noqa: F401
from ..throughput.stats import stamp_figures as repeat_figures  # noqa: F401
