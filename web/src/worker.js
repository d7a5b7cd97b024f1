// The worker that runs the model, off the page's thread (the page never freezes while a batch decodes). It
// answers the messages of encdec.js: {id, type: "load", base} and {id, type: "translate" | "encode", ...}, each
// with {id, result} or {id, error}.
import * as ort from "onnxruntime-web/wasm";
import { Translator, fetchBytes } from "./translator.js";

let translator = null;

/** ONNX Runtime Web's WebAssembly binary: the site ships it gzipped, inflated here (a server that already sent it
 * with Content-Encoding: gzip hands over the plain binary, which is used as it is). */
async function wasmBinary(url) {
  const bytes = await fetchBytes(url);
  if (bytes[0] !== 0x1f || bytes[1] !== 0x8b) return bytes;
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function load(base) {
  ort.env.wasm.numThreads = 1;  // no SharedArrayBuffer, so no cross-origin isolation needed
  ort.env.wasm.proxy = false;  // this worker is already off the page's thread
  ort.env.wasm.wasmBinary = await wasmBinary(new URL("ort-wasm.wasm.gz", base));
  translator = await Translator.load(ort, new URL("model/", base));
  return translator.info();
}

const handlers = {
  load: ({ base }) => load(base),
  translate: ({ lines, options }) => translator.translate(lines, options),
  encode: ({ lines }) => translator.encode(lines),
};

self.onmessage = async ({ data }) => {
  try {
    self.postMessage({ id: data.id, result: await handlers[data.type](data) });
  } catch (error) {
    self.postMessage({ id: data.id, error: String(error?.message ?? error) });
  }
};
