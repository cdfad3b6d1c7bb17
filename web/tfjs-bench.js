// The transformers.js peer: the same exported directory, served locally, generating greedily from the
// same prompt ids; a streamer stamps each generated token.
import { AutoModelForCausalLM, BaseStreamer, Tensor, env } from './node_modules/@huggingface/transformers/dist/transformers.web.js';
import { environment, expose, wasmBinaries, workersStarted } from './common.js';

const ORT_DIST = new URL('./node_modules/@huggingface/transformers/node_modules/onnxruntime-web/dist/', import.meta.url).href;
let model = null;

class Stamps extends BaseStreamer {
  constructor(t0) { super(); this.t0 = t0; this.calls = 0; this.stamps = []; }
  put(value) {
    // the first call carries the prompt; every later call one new token per row
    this.calls += 1;
    if (this.calls > 1) this.stamps.push(performance.now() - this.t0);
  }
  end() {}
}

async function load(cfg) {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = cfg.localModelPath;
  env.useBrowserCache = false;
  env.useWasmCache = false;
  const onnx = env.backends.onnx;
  onnx.wasm.wasmPaths = { mjs: ORT_DIST + 'ort-wasm-simd-threaded.asyncify.mjs', wasm: ORT_DIST + 'ort-wasm-simd-threaded.asyncify.wasm' };
  onnx.wasm.numThreads = cfg.numThreads;
  onnx.wasm.proxy = false;
  const t0 = performance.now();
  model = await AutoModelForCausalLM.from_pretrained(cfg.modelId, {
    dtype: cfg.dtype, device: 'wasm', local_files_only: true,
  });
  const loadMs = performance.now() - t0;
  const sess = model.sessions && (model.sessions.model || Object.values(model.sessions)[0]);
  return {
    load_ms: loadMs,
    env: environment(),
    ort_version: onnx.versions ? (onnx.versions.web || onnx.versions.common) : null,
    wasm_binaries: wasmBinaries(),
    num_threads_requested: cfg.numThreads,
    num_threads_effective: onnx.wasm.numThreads,
    workers_started: workersStarted(),
    proxy: onnx.wasm.proxy,
    input_names: sess ? sess.inputNames : null,
    output_names: sess ? sess.outputNames : null,
  };
}

async function generate(arg) {
  const n = arg.ids.length;
  const inputIds = new Tensor('int64', BigInt64Array.from(arg.ids, (v) => BigInt(v)), [1, n]);
  const mask = new Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]);
  const t0 = performance.now();
  const streamer = new Stamps(t0);
  const out = await model.generate({
    input_ids: inputIds,
    attention_mask: mask,
    max_new_tokens: arg.newTokens,
    do_sample: false,
    eos_token_id: null,   // ignore EOS: exactly newTokens greedy tokens
    streamer,
  });
  const total = performance.now() - t0;
  const all = Array.from(out.data, (v) => Number(v));
  return { ids: all.slice(n), token_ms: streamer.stamps, total_ms: total, workers_started: workersStarted() };
}

expose({ load, generate, environment: async () => environment() });
