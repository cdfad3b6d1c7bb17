// Shared by both lanes: environment facts, a Worker counter (threads actually started), and the
// job protocol the Python driver polls (window.__gatehouse_jobs[id] = {done, result | error}).

const startedWorkers = [];
const NativeWorker = globalThis.Worker;
if (NativeWorker) {
  // Emscripten starts one Worker per wasm thread beyond the main one; counting them tells how many
  // threads the runtime really started, not how many it was asked for.
  globalThis.Worker = class extends NativeWorker {
    constructor(url, options) {
      super(url, options);
      startedWorkers.push(String(url).slice(0, 200));
    }
  };
}

// The smallest module that uses a v128 instruction: validates only where wasm SIMD is supported.
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1,
  8, 0, 65, 0, 253, 15, 253, 98, 11]);

export function environment() {
  const ua = navigator.userAgent;
  const m = ua.match(/(?:HeadlessChrome|Chrome|Chromium)\/([\d.]+)/);
  return {
    crossOriginIsolated: globalThis.crossOriginIsolated === true,
    sharedArrayBuffer: typeof SharedArrayBuffer !== 'undefined',
    simd: WebAssembly.validate(SIMD_PROBE),
    hardwareConcurrency: navigator.hardwareConcurrency,
    userAgent: ua,
    browserVersion: m ? m[1] : null,
  };
}

// The wasm binaries this page has fetched (file names), for the receipt.
export function wasmBinaries() {
  return [...new Set(performance.getEntriesByType('resource').map((e) => e.name)
    .filter((n) => n.endsWith('.wasm')).map((n) => n.slice(n.lastIndexOf('/') + 1)))];
}

export function workersStarted() {
  return startedWorkers.length;
}

export function argmaxRow(data, row, width) {
  let best = 0;
  let bestValue = -Infinity;
  const base = row * width;
  for (let i = 0; i < width; i++) {
    const v = data[base + i];
    if (v > bestValue) { bestValue = v; best = i; }
  }
  return best;
}

export function int64(values, dims) {
  return { data: BigInt64Array.from(values, (v) => BigInt(v)), dims };
}

// Time a plain copy of `bytes` bytes (TypedArray.set, what onnxruntime-web does moving a tensor into
// or out of the wasm heap): the floor of what a cache copy costs per step.
export function copyCostMs(bytes, reps = 5) {
  const n = Math.max(1, Math.floor(bytes / 4));
  const src = new Float32Array(n).fill(1.5);
  const dst = new Float32Array(n);
  dst.set(src);
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) dst.set(src);
  return (performance.now() - t0) / reps;
}

// Expose `api` for the driver: it starts a job with start(name, arg) and polls jobs[id].
export function expose(api) {
  const jobs = {};
  let next = 0;
  globalThis.__gatehouse_jobs = jobs;
  globalThis.__gatehouse = {
    ready: true,
    start(name, arg) {
      const id = String(++next);
      jobs[id] = { done: false };
      Promise.resolve()
        .then(() => api[name](arg))
        .then((result) => { jobs[id] = { done: true, result }; },
              (err) => { jobs[id] = { done: true, error: String(err && err.stack || err) }; });
      return id;
    },
    names: Object.keys(api),
  };
}
