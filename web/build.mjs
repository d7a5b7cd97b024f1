// `npm run build` (what `make web` runs after `npm ci`): bundles the library with esbuild and writes the browser
// runtime that `encdec export --format web` copies into a site, into the package data folder
// src/encdec/ship/web_runtime/ (built, never committed):
//   encdec.js          the page-side library (window.encdec), a classic script: it starts the worker
//   encdec-worker.js   the worker: ONNX Runtime Web (wasm backend), the tokenizer, greedy and beam search
//   ort-wasm.wasm.gz   ONNX Runtime Web's WebAssembly binary, gzip -9 (a quarter of its 14 MB); the worker inflates
//                      it with the browser's DecompressionStream, so any static file server will do
//   index.html         the translate page; web-runtime.json: what was built, from which pinned packages
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "encdec", "ship", "web_runtime");
const require = (name) => JSON.parse(readFileSync(join(here, "node_modules", name, "package.json"), "utf8"));
// the single-threaded SIMD build is the one file the wasm backend loads with numThreads = 1 (no cross-origin
// isolation needed); the threaded glue is bundled into encdec-worker.js by onnxruntime-web/wasm's bundle entry
const WASM = join(here, "node_modules", "onnxruntime-web", "dist", "ort-wasm-simd-threaded.wasm");

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const common = { bundle: true, minify: true, target: "chrome100", legalComments: "none", logLevel: "warning" };
await build({ ...common, entryPoints: [join(here, "src", "encdec.js")], format: "iife",
              outfile: join(out, "encdec.js") });
await build({ ...common, entryPoints: [join(here, "src", "worker.js")], format: "esm",
              outfile: join(out, "encdec-worker.js") });
const wasm = readFileSync(WASM);
writeFileSync(join(out, "ort-wasm.wasm.gz"), gzipSync(wasm, { level: 9 }));
writeFileSync(join(out, "index.html"), readFileSync(join(here, "index.html")));
const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8")).packages;
const pinned = Object.fromEntries(["onnxruntime-web", "@huggingface/tokenizers", "esbuild"].map(
  (name) => [name, { version: require(name).version, integrity: lock[`node_modules/${name}`].integrity }]));
writeFileSync(join(out, "web-runtime.json"), JSON.stringify({
  format: "encdec-web-runtime", version: 1, packages: pinned,
  wasm: { file: "ort-wasm.wasm.gz", source: "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
          bytes: wasm.length, sha256: createHash("sha256").update(wasm).digest("hex") },
}, null, 2) + "\n");
console.log(`web runtime written to ${out}`);
