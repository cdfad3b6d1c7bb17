"""``bin/gatehouse compare BASE_RUN NEW_RUN``: what changed between two runs, and whether it is a regression.

Per variant and gate: verdicts that flipped; quality figures with their uncertainty; decode throughput per
lane x cell with a Mann-Whitney U rank test of one run's per-repeat rates against the other's (the runs
are two sessions, never interleaved, so the win rule's paired test cannot apply), Holm-corrected across
the comparison, only between receipts of one machine fingerprint.  A fail-on threshold crossed exits 1.

The package, in the order the data flows:

- :mod:`.policy`: ``ComparePolicy`` (alpha, minimum samples, fail-on thresholds) and its grammar, parsed
  from a campaign's ``[compare]`` table and the command line;
- :mod:`.stats`: the rank test and Holm's correction, pure;
- :mod:`.sides`: one run's header (``RunSide``) and the machine fingerprint a receipt ran on;
- :mod:`.throughput`: the lane cells of each side, tested, Holm-corrected and judged against the session guard;
- :mod:`.rule`: ``compare(base, new, policy) -> Comparison`` from two collected runs, pure;
- :mod:`.render`: Markdown, HTML and the terminal's summary;
- :mod:`.cli`: the command line (``python -m harness.compare``).

Importing this package imports none of them (the campaign loader imports :mod:`.policy` alone).
"""
