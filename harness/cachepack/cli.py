"""``bin/gatehouse cache export PATH [--kind KIND]... [--key KEY]... | import PATH [--expect-sha256 HEX] | list``.

Each command works on the artifact store ``--root DIR`` (default ``$GATEHOUSE_CACHE`` or
``~/.cache/gatehouse/artifacts``) and holds the machine lock shared, as a build does: hashing gigabytes is
machine work, and a timing test running meanwhile waits for it. Exit codes: 0 done; 1 (``list``) an entry does
not verify; 2 a usage error, an error naming the file, field or value at fault, or (``import``) a refused entry.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from .. import locks
from ..artifacts import default_root
from ..errors import HarnessError
from . import entries, reader, writer

PROG = "bin/gatehouse cache"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _kinds(names) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(Counter(names).items()))


def _export(args, root: Path) -> int:
    print(f"{PROG} export: verifying the entries of {root}", file=sys.stderr, flush=True)
    done = writer.export(root, args.path, args.kind, args.key)
    print(f"wrote {done.path}: {len(done.entries)} entries ({_kinds(e.kind for e in done.entries)}), "
          f"{_mb(sum(e.bytes for e in done.entries))}, in {done.seconds:.1f} s")
    print(f"  archive {_mb(done.bytes)}, sha256 {done.sha256}")
    for name, why in done.skipped:
        print(f"  skipped {name}: {why}")
    return 0


def _import(args, root: Path) -> int:
    from .. import fingerprint

    done = reader.import_(args.path, root, args.expect_sha256)
    src = done.source
    harness, machine = src.get("harness") or {}, src.get("machine") or {}
    print(f"{done.archive}: exported {src.get('created_at')} on {machine.get('hostname')} from {src.get('store')} "
          f"(harness {harness.get('version')}, source {str(harness.get('sha256'))[:12]}, "
          f"git {str(harness.get('git_commit'))[:12]})")
    print(f"into {Path(root).resolve()}: imported {len(done.imported)} ({_mb(done.bytes)}), already present "
          f"{len(done.present)}, refused {len(done.refused)}, in {done.seconds:.1f} s")
    for name, why in done.refused:
        print(f"  refused {name}: {why}")
    if harness.get("sha256") and harness["sha256"] != fingerprint.harness_source()["sha256"]:
        print("  note: the archive comes from another harness source than this checkout's; an entry whose "
              "builder's source changed since is keyed differently here and will not be reused")
    if done.refused:
        print(f"{PROG} import: {len(done.refused)} refused (first: {done.refused[0][0]}: {done.refused[0][1]})",
              file=sys.stderr)
        return 2
    return 0


def _list(args, root: Path) -> int:
    if not Path(root).is_dir():
        raise HarnessError(f"{root}: no artifact store there")
    listed = [x for x in entries.scan(root, check=not args.no_verify)
              if not args.kind or x.kind in args.kind or x.status == "building"]
    for x in listed:
        size = f"{x.bytes:,}" if x.bytes is not None else "-"
        print(f"{x.kind or '-':<16} {x.key or x.name:<64} {size:>15} {x.status}")
        if x.problem:
            print(f"    {x.problem}")
    status = Counter(x.status for x in listed)
    print(f"{Path(root).resolve()}: {sum(status[s] for s in ('ok', 'fails', 'unchecked', 'incomplete'))} entries, "
          f"{_mb(sum(x.bytes or 0 for x in listed if x.status != 'building'))}: "
          + ", ".join(f"{n} {s}" for s, n in sorted(status.items())))
    return 1 if status["fails"] else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Carry artifact-store entries between machines: one archive, "
                                "every file re-verified by SHA-256 on import")
    sub = p.add_subparsers(dest="command", required=True, metavar="{export,import,list}")
    root_help = "the artifact store (default: $GATEHOUSE_CACHE or ~/.cache/gatehouse/artifacts)"
    ex = sub.add_parser("export", help="write the store's verified entries into one archive (a tar)")
    ex.add_argument("path", metavar="PATH", help="the archive to write (replaced atomically)")
    ex.add_argument("--kind", action="append", default=[], metavar="KIND",
                    help="only entries of this kind (hf, export, recipe, behavior...); repeatable")
    ex.add_argument("--key", action="append", default=[], metavar="KEY",
                    help="only this entry: its name (export-507b0c5f397b45a00b5a) or 8+ hex digits of its key; "
                         "repeatable; with --kind, entries matching either are written")
    im = sub.add_parser("import", help="verify and add an archive's entries to the store")
    im.add_argument("path", metavar="PATH", help="a cache archive written by export (a .tar.gz of one reads too)")
    im.add_argument("--expect-sha256", metavar="HEX", help="refuse the archive unless its SHA-256 is this "
                    "(as export printed it)")
    ls = sub.add_parser("list", help="the store's entries: kind, key, bytes, and whether each verifies")
    ls.add_argument("--kind", action="append", default=[], metavar="KIND", help="only this kind; repeatable")
    ls.add_argument("--no-verify", action="store_true", help="do not re-hash the files (fast)")
    for s in (ex, im, ls):
        s.add_argument("--root", metavar="DIR", help=root_help)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    root = Path(args.root) if args.root else default_root()
    try:
        with locks.machine(exclusive=False):
            return {"export": _export, "import": _import, "list": _list}[args.command](args, root)
    except HarnessError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 2
