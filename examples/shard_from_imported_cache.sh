#!/bin/bash
# Does a shard started from an imported cache build nothing? (issue 32; docs/measurements.md 2026-12-06)
# Runs a CI shard on this machine's store, exports the entries it used, imports them into an empty store, runs the
# same shard there from a second checkout at another path (its venv linked there, so the venv's paths differ as a
# fresh machine's would; PYTHONPATH makes it import its own harness, not the editable install's) and compares what
# each built and each verdict. The gate tests of a CI shard, the overlay gates included (their donors' keys once
# held the venv's path). Writes /tmp/shardA, /tmp/shardB, /tmp/store2, /tmp/shard-checkout.
set -u
cd "$(dirname "$0")/.."
SEL='not streaming'   # with -m "ci and gate": the gate tests a CI shard runs
rm -rf /tmp/shardA /tmp/shardB /tmp/store2 /tmp/shard.tar /tmp/shard-checkout
# what set-up would install on that machine: the venv (linked) and the browser page's npm packages (copied: the
# page server serves no link that leaves the tree)
git clone -q . /tmp/shard-checkout && ln -s "$PWD/.venv" /tmp/shard-checkout/.venv &&
  cp -a web/node_modules /tmp/shard-checkout/web/node_modules
start=$(date +%s)
.venv/bin/pytest -m "ci and gate" -k "$SEL" --shard 1/2 -p no:xdist -q --run-dir /tmp/shardA > /tmp/gh/shardA.log 2>&1
rc=$?; echo "A rc=$rc $(( $(date +%s) - start )) s"; [ $rc -le 1 ] || exit 1
keys=$(python3 -c "
import json
ks=sorted({json.loads(l)['key'] for l in open('/tmp/shardA/builds.jsonl') if l.strip()})
print(' '.join('--key '+k for k in ks))")
echo "keys: $(( $(echo $keys | wc -w) / 2 ))"
t=$(date +%s); .venv/bin/python -m harness.cachepack export /tmp/shard.tar $keys > /tmp/gh/export.log 2>&1; rc=$?; echo "export rc=$rc $(( $(date +%s) - t )) s"; [ $rc -eq 0 ] || exit 1
t=$(date +%s); .venv/bin/python -m harness.cachepack import /tmp/shard.tar --root /tmp/store2 > /tmp/gh/import.log 2>&1; rc=$?; echo "import rc=$rc $(( $(date +%s) - t )) s"; [ $rc -eq 0 ] || exit 1
start=$(date +%s)
(cd /tmp/shard-checkout && PYTHONPATH=/tmp/shard-checkout .venv/bin/pytest -m "ci and gate" -k "$SEL" --shard 1/2 \
   -p no:xdist -q --run-dir /tmp/shardB \
   --artifact-cache /tmp/store2 > /tmp/gh/shardB.log 2>&1)
echo "B rc=$? $(( $(date +%s) - start )) s"
python3 - <<'PY'
import json
for run in ("/tmp/shardA", "/tmp/shardB"):
    b=[json.loads(l) for l in open(run+"/builds.jsonl") if l.strip()]
    print(run, "acquisitions", len(b), "built", sum(not x["hit"] for x in b), [x["label"] for x in b if not x["hit"]][:10])
import glob
va={json.load(open(f))["nodeid"]: json.load(open(f))["verdict"]["outcome"] for f in glob.glob("/tmp/shardA/receipts/*.json")}
vb={json.load(open(f))["nodeid"]: json.load(open(f))["verdict"]["outcome"] for f in glob.glob("/tmp/shardB/receipts/*.json")}
print("receipts", len(va), len(vb), "same verdicts:", va == vb)
PY
