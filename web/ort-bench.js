// The onnxruntime-web lane: loads one exported decoder graph and runs the shared workload's greedy
// loop (prefill, then one-token steps with the past key/values fed back), timing every part.
// The bundle whose wasm binary is ort-wasm-simd-threaded.asyncify.wasm (the one transformers.js loads),
// run on the wasm execution provider: on this machine its MatMulNBits decodes q4 1.3x faster than the
// plain ort-wasm-simd-threaded.wasm of ort.wasm.min.mjs, with fp32 and q8 the same (DEVELOPERS.md).
import * as ort from './node_modules/onnxruntime-web/dist/ort.webgpu.min.mjs';
import { argmaxRow, copyCostMs, environment, expose, int64, wasmBinaries, workersStarted } from './common.js';

let session = null;
let graph = null;

function tensor64(values, dims) {
  const t = int64(values, dims);
  return new ort.Tensor('int64', t.data, t.dims);
}

// Packed delivery (harness/export/packed.py): fetch pack.json and pack.bin, expand every packed tensor into the
// bytes of the graph's external data file exactly as the exporter defines them (float64 arithmetic, one rounding
// to float32 per value), and check their SHA-256 against the index before the session may use them.
async function expandPack(url) {
  const t0 = performance.now();
  const index = await (await fetch(url)).json();
  const packResponse = await fetch(new URL(index.pack_file, url));
  if (!packResponse.ok) throw new Error(`${index.pack_file}: HTTP ${packResponse.status}`);
  const pack = await packResponse.arrayBuffer();
  const fetched = performance.now();
  const bytes = new Uint8Array(index.data_bytes);
  for (const t of index.tensors) {
    const { rows, cols, block } = t;
    const nb = cols / block;
    const out = new Float32Array(bytes.buffer, t.data[0], rows * cols);
    const codes = new Uint8Array(pack, t.codes[0], t.codes[1]);
    const scales = new Float16Array(pack, t.scales[0], t.scales[1] / 2);
    const offsets = t.offsets ? new Float16Array(pack, t.offsets[0], t.offsets[1] / 2) : null;
    const zeros = t.zeros ? new Uint8Array(pack, t.zeros[0], t.zeros[1]) : null;
    const four = t.encoding !== 'q8_zp';
    for (let n = 0; n < rows; n++) {
      for (let b = 0; b < nb; b++) {
        const d = scales[n * nb + b];
        const m = offsets ? offsets[n * nb + b] : 0;
        const z = zeros ? zeros[n * nb + b] : 0;
        for (let j = 0; j < block; j++) {
          const k = b * block + j;
          let q;
          if (four) {
            const byte = codes[(n * cols + k) >> 1];
            q = (k & 1) ? (byte >> 4) : (byte & 15);
          } else {
            q = codes[n * cols + k];
          }
          const v = offsets ? d * q + m : (q - z) * d;
          out[t.transpose ? k * rows + n : n * cols + k] = v;
        }
      }
    }
  }
  const expanded = performance.now();
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  const hex = [...new Uint8Array(digest)].map((x) => x.toString(16).padStart(2, '0')).join('');
  if (hex !== index.data_sha256) {
    throw new Error(`packed expansion: SHA-256 ${hex} differs from the graph's data ${index.data_sha256}`);
  }
  return { index, bytes, fetch_ms: fetched - t0, expand_ms: expanded - fetched, hash_ms: performance.now() - expanded,
           pack_bytes: pack.byteLength, data_sha256: hex };
}

// Bytes the page downloaded from the artifact store (graph, pack, index): transfer sizes of its resources.
function downloadedBytes(prefix) {
  return performance.getEntriesByType('resource').filter((e) => e.name.includes(prefix))
    .reduce((sum, e) => sum + (e.encodedBodySize || e.transferSize || 0), 0);
}

async function load(cfg) {
  ort.env.wasm.wasmPaths = new URL('./node_modules/onnxruntime-web/dist/', import.meta.url).href;
  ort.env.wasm.numThreads = cfg.numThreads;
  ort.env.wasm.simd = true;
  ort.env.wasm.proxy = !!cfg.proxy;
  ort.env.logLevel = 'warning';
  const options = {
    executionProviders: ['wasm'],
    graphOptimizationLevel: cfg.graphOptimizationLevel || 'all',
    enableCpuMemArena: true,
    enableMemPattern: true,
    executionMode: 'sequential',
    enableProfiling: !!cfg.profiling,
    extra: { session: { intra_op_num_threads: String(cfg.numThreads), ...(cfg.sessionConfig || {}) } },
  };
  const t0 = performance.now();
  let packed = null;
  if (cfg.pack) {
    packed = await expandPack(cfg.pack);
    options.externalData = [{ path: packed.index.data_file, data: packed.bytes }];
  }
  session = await ort.InferenceSession.create(cfg.model, options);
  const loadMs = performance.now() - t0;
  if (packed) packed.bytes = null;
  const pastNames = session.inputNames.filter((n) => n.startsWith('past_key_values.'));
  const meta = session.inputMetadata ? session.inputMetadata : null;
  let kvHeads = null;
  let headDim = null;
  if (meta) {
    const m = Array.isArray(meta) ? meta.find((x) => x.name === pastNames[0]) : meta[pastNames[0]];
    if (m && m.shape) { kvHeads = Number(m.shape[1]); headDim = Number(m.shape[3]); }
  }
  if (!kvHeads || !headDim) {
    kvHeads = cfg.kvHeads; headDim = cfg.headDim;
  }
  graph = { pastNames, kvHeads, headDim };
  return {
    load_ms: loadMs,
    env: environment(),
    ort_version: ort.env.versions ? (ort.env.versions.web || ort.env.versions.common) : null,
    wasm_binaries: wasmBinaries(),
    num_threads_requested: cfg.numThreads,
    num_threads_effective: ort.env.wasm.numThreads,
    workers_started: workersStarted(),
    proxy: ort.env.wasm.proxy,
    input_names: session.inputNames,
    output_names: session.outputNames,
    kv_heads: kvHeads,
    head_dim: headDim,
    download_bytes: cfg.downloadPrefix ? downloadedBytes(cfg.downloadPrefix) : null,
    packed: packed ? { fetch_ms: packed.fetch_ms, expand_ms: packed.expand_ms, hash_ms: packed.hash_ms,
                       pack_bytes: packed.pack_bytes, data_sha256: packed.data_sha256 } : null,
  };
}

function emptyPast() {
  const feeds = {};
  for (const n of graph.pastNames) {
    feeds[n] = new ort.Tensor('float32', new Float32Array(0), [1, graph.kvHeads, 0, graph.headDim]);
  }
  return feeds;
}

async function generate(arg) {
  const prompt = arg.ids;
  const steps = arg.newTokens;
  const n = prompt.length;
  const ids = [];
  const tokenMs = [];
  const feedMs = [];
  const runMs = [];
  const argmaxMs = [];
  let kvBytes = 0;
  const t0 = performance.now();
  let ta = performance.now();
  let feeds = {
    input_ids: tensor64(prompt, [1, n]),
    attention_mask: tensor64(new Array(n).fill(1), [1, n]),
    position_ids: tensor64([...Array(n).keys()], [1, n]),
    ...emptyPast(),
  };
  let tb = performance.now();
  let out = await session.run(feeds);
  let tc = performance.now();
  ids.push(argmaxRow(out.logits.data, n - 1, out.logits.dims[2]));
  let td = performance.now();
  feedMs.push(tb - ta); runMs.push(tc - tb); argmaxMs.push(td - tc);
  tokenMs.push(td - t0);
  for (let s = 1; s < steps; s++) {
    const total = n + s;
    ta = performance.now();
    feeds = {
      input_ids: tensor64([ids[ids.length - 1]], [1, 1]),
      attention_mask: tensor64(new Array(total).fill(1), [1, total]),
      position_ids: tensor64([total - 1], [1, 1]),
    };
    kvBytes = 0;
    for (const name of graph.pastNames) {
      // The present tensor is handed back as it came out; onnxruntime-web (wasm) copies it into the
      // heap on the way in, as it copied it out on the way out.
      const t = out[name.replace('past_key_values', 'present')];
      feeds[name] = t;
      kvBytes += t.data.byteLength;
    }
    const old = out;
    tb = performance.now();
    out = await session.run(feeds);
    tc = performance.now();
    ids.push(argmaxRow(out.logits.data, 0, out.logits.dims[2]));
    td = performance.now();
    for (const k in old) if (old[k].dispose) old[k].dispose();
    feedMs.push(tb - ta); runMs.push(tc - tb); argmaxMs.push(td - tc);
    tokenMs.push(td - t0);
  }
  // the cache that went in at the last step and the one that came out (one more token)
  const lastKv = kvBytes;
  return {
    ids, token_ms: tokenMs, feed_ms: feedMs, run_ms: runMs, argmax_ms: argmaxMs,
    kv_bytes_last_step: lastKv,
    copy_floor_ms_last_step: arg.measureCopy ? 2 * copyCostMs(lastKv) : null,
    workers_started: workersStarted(),
  };
}

// Teacher forcing: one call over the whole sequence (prompt and a reference continuation, empty cache); the
// top-1 id of every row from `from - 1` on, i.e. what the graph predicts at each reference position.
async function teacherForce(arg) {
  const ids = arg.ids;
  const n = ids.length;
  const feeds = {
    input_ids: tensor64(ids, [1, n]),
    attention_mask: tensor64(new Array(n).fill(1), [1, n]),
    position_ids: tensor64([...Array(n).keys()], [1, n]),
    ...emptyPast(),
  };
  const out = await session.run(feeds);
  const top1 = [];
  for (let r = arg.from - 1; r < n; r++) top1.push(argmaxRow(out.logits.data, r, out.logits.dims[2]));
  for (const k in out) if (out[k].dispose) out[k].dispose();
  return { top1 };
}

async function endProfiling() {
  await session.endProfiling();
  return true;
}

async function release() {
  if (session) await session.release();
  session = null;
  return true;
}

expose({ load, generate, teacherForce, endProfiling, release, environment: async () => environment() });
