"""What the plugin writes to the terminal: progress lines as builds and tests go, the Gatehouse section of the
terminal summary, and the same summary appended to ``$GITHUB_STEP_SUMMARY`` under CI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import jsonfile, progress, report, rundir
from .errors import HarnessError


def install_progress(config, run_path: Path, worker: str | None):
    """Progress lines (harness.progress): an xdist worker appends them to its log in the run directory for the
    controller to show; the main process writes them through the terminal writer, nothing under ``-q``."""
    if worker is not None:
        sink = progress.file_sink(rundir.RunDir(run_path).progress / f"{worker}.log")
    elif config.get_verbosity() < 0:
        sink = lambda line: None   # noqa: E731 - quiet under -q
    else:
        sink = terminal_sink(config)
    return progress.install(sink)


def terminal_sink(config):
    from contextlib import nullcontext

    def sink(line: str) -> None:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            print(line, file=sys.__stderr__, flush=True)
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():   # as pytest's live logging
            if tr._tw.width_of_current_line:   # a line of progress dots in the making ends first
                tr._tw.line()
            tr.write_line(line)
            tr.flush()

    return sink


def summary(tr, gs, config) -> None:
    """The Gatehouse section of the terminal summary: the variants, the report's paths and the run directory."""
    tr.section("gatehouse")
    if getattr(gs, "report_error", None):
        tr.write_line(f"report not rebuilt: {gs.report_error}", red=True)
    paths = getattr(gs, "report_paths", None)
    if paths:
        from .report import summary

        try:
            rep = jsonfile.load(paths["json"], "report")
        except HarnessError as exc:
            tr.write_line(f"report unreadable: {exc}", red=True)
            rep = None
        if rep is not None:
            if config.get_verbosity() >= 0:
                for line in summary.terminal_lines(rep, gs.run_path):
                    tr.write_line(line)
            step_summary(tr, summary.markdown_summary(rep, paths))
        tr.write_line(report.summary_line(paths["json"]))
        for kind in ("md", "html"):
            if paths.get(kind):
                tr.write_line(f"report: {paths[kind]}")
    tr.write_line(f"run directory: {gs.run_path}")


def step_summary(tr, text: str) -> None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` when CI sets it (GitHub Actions' job summary)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        tr.write_line(f"GITHUB_STEP_SUMMARY={target}: cannot append the summary: {exc}", red=True)
