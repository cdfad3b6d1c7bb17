#!/usr/bin/env bash
# Builds the native throughput probe (native/probe/) against the ONNX Runtime C API, idempotently.
#
# Headers: Debian trixie's libonnxruntime-dev, downloaded (never installed) with a temporary APT
# source that reuses the mirror already configured on this machine, and unpacked into the build
# directory. Library: the one the pinned `onnxruntime` wheel ships in the virtual environment
# (capi/libonnxruntime.so.<version>); the build directory gets the `.so.1` link it lacks.
#
#   GATEHOUSE_VENV      the virtual environment (default: .venv)
#   GATEHOUSE_NATIVE_BUILD  the build directory (default: native/build/probe, gitignored)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${GATEHOUSE_VENV:-$ROOT/.venv}
BUILD=${GATEHOUSE_NATIVE_BUILD:-$ROOT/native/build/probe}
HEADERS=${GATEHOUSE_ORT_HEADERS:-$ROOT/native/build/ort-headers}
log() { printf '[native] %s\n' "$*" >&2; }

# -- tools -------------------------------------------------------------------------------------
missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v make >/dev/null 2>&1 || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# -- the runtime library of the pinned wheel ----------------------------------------------------
CAPI=$("$VENV/bin/python" - <<'PY'
import pathlib, onnxruntime
print(pathlib.Path(onnxruntime.__file__).parent / "capi")
PY
)
LIB=$(ls "$CAPI"/libonnxruntime.so.1.* 2>/dev/null | head -n1 || true)
if [ -z "$LIB" ]; then
  echo "[native] $CAPI: the onnxruntime wheel ships no libonnxruntime.so.1.*" >&2
  exit 1
fi
mkdir -p "$BUILD/lib"
ln -sfn "$LIB" "$BUILD/lib/libonnxruntime.so.1"
ln -sfn "$LIB" "$BUILD/lib/libonnxruntime.so"

# -- headers (downloaded once) ---------------------------------------------------------------
if [ ! -f "$HEADERS/include/onnxruntime_c_api.h" ]; then
  log "fetching the ONNX Runtime C API headers (Debian trixie libonnxruntime-dev, unpacked, not installed)"
  command -v apt-get >/dev/null || { echo "[native] apt-get is needed to fetch the headers" >&2; exit 1; }
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  URI=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    URI=$(awk '/^URIs:/ {print $2; exit}' "$f")
    [ -n "$URI" ] && break
  done
  if [ -z "$URI" ] && [ -f /etc/apt/sources.list ]; then
    URI=$(awk '$1=="deb" {for (i=2;i<=NF;i++) if ($i ~ /^(https?|file):/) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$URI" ] || { echo "[native] no APT mirror configured in /etc/apt/sources.list.d/*.sources" >&2; exit 1; }
  KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
  echo "deb [signed-by=$KEYRING] $URI trixie main" > "$TMP/trixie.list"
  mkdir -p "$TMP/lists/partial" "$TMP/archives/partial"
  OPTS=(-o "Dir::Etc::SourceList=$TMP/trixie.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$TMP/lists" -o "Dir::Cache=$TMP/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root -qq)
  mkdir -p "$TMP/cache"
  apt-get "${OPTS[@]}" update
  (cd "$TMP" && apt-get "${OPTS[@]}" download libonnxruntime-dev)
  DEB=$(ls "$TMP"/libonnxruntime-dev_*.deb | head -n1)
  rm -rf "$TMP/x" && dpkg -x "$DEB" "$TMP/x"
  H=$(dirname "$(find "$TMP/x" -name onnxruntime_c_api.h | head -n1)")
  mkdir -p "$HEADERS/include"
  cp -r "$H"/. "$HEADERS/include/"
  basename "$DEB" > "$HEADERS/SOURCE"
fi

# -- the probe (rebuilt only when its sources or the runtime library changed) -----------------------
# Its sources: the files of native/probe/, then of native/common/ (the headers it shares with the
# streaming programs), each directory in byte order of name, concatenated; dot files left out.
# harness/throughput/probe.py:sources_sha256 computes the same hash to decide whether to rebuild.
WANT=$(for dir in probe common; do
         (cd "$ROOT/native/$dir" && for f in $(LC_ALL=C ls); do if [ -f "$f" ]; then cat "$f"; fi; done)
       done | sha256sum | cut -d' ' -f1)
if [ -x "$BUILD/gatehouse-probe" ] && [ "$(cat "$BUILD/SOURCES.sha256" 2>/dev/null)" = "$WANT" ] \
   && [ "$(cat "$BUILD/RUNTIME" 2>/dev/null)" = "$LIB" ]; then
  log "probe up to date: $BUILD/gatehouse-probe"
  exit 0
fi
cmake -S "$ROOT/native/probe" -B "$BUILD/cmake" -DCMAKE_BUILD_TYPE=Release \
  -DORT_INCLUDE_DIR="$HEADERS/include" -DORT_LIB_DIR="$BUILD/lib" >/dev/null
cmake --build "$BUILD/cmake" -j 2 >/dev/null
cp "$BUILD/cmake/gatehouse-probe" "$BUILD/gatehouse-probe.tmp" && mv "$BUILD/gatehouse-probe.tmp" "$BUILD/gatehouse-probe"
log "probe: $BUILD/gatehouse-probe (runtime $LIB)"
# what this binary was built from (the harness rebuilds when the sources change)
echo "$WANT" > "$BUILD/SOURCES.sha256"
echo "$LIB" > "$BUILD/RUNTIME"
