// The worker that runs the model, off the page's thread (the page never freezes while a batch decodes). It
// answers the messages of encdec.js: {id, type: "load", base} and {id, type: "translate" | "encode", ...}, each
// with {id, result} or {id, error}; while it loads, it posts {progress: {loaded, total}}: the bytes received of the
// files that the rules' `download` lists (the graphs, the tokenizer, ONNX Runtime Web's binary) and their sum.
import * as ort from "onnxruntime-web/wasm";
import { Translator, fetchBytes, fetchJson } from "./translator.js";

let translator = null;

/** ONNX Runtime Web's WebAssembly binary: the site ships it gzipped, inflated here (a server that already sent it
 * with Content-Encoding: gzip hands over the plain binary, which is used as it is). */
async function wasmBinary(url, bytesOf) {
  const bytes = await bytesOf(url);
  if (bytes[0] !== 0x1f || bytes[1] !== 0x8b) return bytes;
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** fetchBytes that posts the download's progress for the files `download` lists (by their path in the site at
 * `base`); the count stops at the recorded total (a server that inflates a gzipped file sends more bytes). */
function counted(base, download) {
  const total = download?.bytes ?? null;
  let loaded = 0;
  const report = (bytes) => {
    loaded = Math.min(loaded + bytes, total);
    self.postMessage({ progress: { loaded, total } });
  };
  const bytesOf = (url) => {
    const name = String(url).startsWith(base) ? String(url).slice(base.length) : null;
    return download && Object.hasOwn(download.files, name) ? fetchBytes(url, report) : fetchBytes(url);
  };
  return { bytesOf, done: () => total !== null && report(total) };
}

async function load(base) {
  const model = new URL("model/", base);
  const rules = await fetchJson(new URL("encdec_decoding.json", model));
  const download = counted(base, rules.download);
  ort.env.wasm.numThreads = 1;  // no SharedArrayBuffer, so no cross-origin isolation needed
  ort.env.wasm.proxy = false;  // this worker is already off the page's thread
  ort.env.wasm.wasmBinary = await wasmBinary(new URL("ort-wasm.wasm.gz", base), download.bytesOf);
  translator = await Translator.load(ort, model, rules, download.bytesOf);
  download.done();
  return translator.info();
}

const handlers = {
  load: ({ base }) => load(base),
  translate: ({ lines, options }) => translator.translate(lines, options),
  encode: ({ lines, options }) => translator.encode(lines, options),
};

self.onmessage = async ({ data }) => {
  try {
    self.postMessage({ id: data.id, result: await handlers[data.type](data) });
  } catch (error) {
    self.postMessage({ id: data.id, error: String(error?.message ?? error) });
  }
};
