// The browser peer: wllama (llama.cpp compiled to WebAssembly, @wllama/wllama) on the model's original GGUF, in
// the same Chromium as the onnxruntime-web lanes. wllama 3.x runs llama-server's completion handler inside the
// wasm module: a prompt is text and the stream gives one text chunk per generated token (a token-id prompt is
// refused by its message encoder), so the driver sends the workload's prompt ids decoded to text and checks the
// engine's prompt token count (timings.prompt_n) against the ids. Greedy: temperature 0, EOS ignored, no prompt
// cache between generations. Every chunk is stamped when the page receives it.
import { Wllama } from './node_modules/@wllama/wllama/esm/index.js';
import { environment, expose, wasmBinaries, workersStarted } from './common.js';

let wllama = null;

async function load(cfg) {
  const t0 = performance.now();
  const wasm = new URL('./node_modules/@wllama/wllama/esm/wasm/wllama.wasm', import.meta.url).href;
  wllama = new Wllama({ default: wasm }, { suppressNativeLog: true });
  const response = await fetch(cfg.model);
  if (!response.ok) throw new Error(`${cfg.model}: HTTP ${response.status}`);
  const blob = await response.blob();
  const fetched = performance.now();
  await wllama.loadModel([blob], { n_ctx: cfg.nCtx, n_threads: cfg.numThreads, n_gpu_layers: 0 });
  return {
    load_ms: performance.now() - t0,
    fetch_ms: fetched - t0,
    model_bytes: blob.size,
    env: environment(),
    wasm_binaries: wasmBinaries(),
    num_threads_requested: cfg.numThreads,
    num_threads_effective: wllama.getNumThreads(),
    multithread: wllama.isMultithread(),
    workers_started: workersStarted(),
  };
}

async function generate(arg) {
  const pieces = [];
  const tokenMs = [];
  let timings = null;
  const t0 = performance.now();
  await wllama.createCompletion({
    prompt: arg.text, max_tokens: arg.newTokens, temperature: 0, ignore_eos: true, cache_prompt: false,
    stream: true,
    onData: (chunk) => {
      const now = performance.now() - t0;
      const c = chunk.choices && chunk.choices[0];
      if (chunk.timings) timings = chunk.timings;
      if (c && c.finish_reason === null) { pieces.push(c.text); tokenMs.push(now); }
    },
  });
  return { pieces, token_ms: tokenMs, timings, workers_started: workersStarted(), total_ms: performance.now() - t0 };
}

async function release() {
  if (wllama) await wllama.exit();
  wllama = null;
  return true;
}

expose({ load, generate, release, environment: async () => environment() });
