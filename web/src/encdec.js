// window.encdec: translation in the browser, the library that the site's page uses and any other page can call.
//
//   <script src="encdec.js"></script>
//   await encdec.ready;      // {family, weights, numBeams, maxBeams, maxSourceTokens, languages, page, ...}
//   await encdec.translate(["Ein Mann."], {numBeams: 5, maxNewTokens: 64});   // ["A man."]
//   await encdec.translate(["Ein Mann."], {source: "de", target: "fr"});      // a multilingual model: ["Un homme."]
//
// translate(lines, options) returns a Promise of one translation per line (a blank line gives ""); options:
// source and target (a multilingual model's languages, `ready`'s `languages`: both required, each one of them; a
// bilingual model takes none, or the pair its card names), numBeams (default: the model's generation_config.json; 1
// is greedy search), maxNewTokens (default: the model's, else from the source's length) and noRepeatNgramSize
// (default: the model's; 0 is off); a glossary is refused (the site has no alignment to put terms in by). It rejects an
// over-long line, a bad option or a missing or unknown language with an Error that says which. The model runs in a
// Web Worker (encdec-worker.js) with ONNX Runtime Web, so the page
// stays responsive; requests run one after the other. The site's files are found beside this script: model/,
// encdec-worker.js, ort-wasm.wasm.gz. While the model downloads, encdec fires "progress" events ({detail: {loaded,
// total}}, in bytes; `encdec.download` holds the latest), and `ready` gives the download's size (downloadBytes), what
// the page says about the model (page: name, data, languages, example) and its languages (null: bilingual).
(() => {
  const base = new URL(".", document.currentScript.src).href;
  const worker = new Worker(new URL("encdec-worker.js", base), { type: "module" });
  const waiting = new Map();
  const events = new EventTarget();
  let next = 0;

  worker.onmessage = ({ data }) => {
    if ("progress" in data) {
      window.encdec.download = data.progress;
      events.dispatchEvent(new CustomEvent("progress", { detail: data.progress }));
      return;
    }
    const { resolve, reject } = waiting.get(data.id);
    waiting.delete(data.id);
    if ("error" in data) reject(new Error(data.error));
    else resolve(data.result);
  };
  worker.onerror = (event) => {
    for (const { reject } of waiting.values()) reject(new Error(event.message || "the worker failed to start"));
    waiting.clear();
  };

  function call(type, message = {}) {
    return new Promise((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      worker.postMessage({ ...message, id, type });
    });
  }

  function checkLines(lines) {
    if (!Array.isArray(lines) || !lines.every((line) => typeof line === "string")) {
      throw new TypeError("lines must be an array of strings");
    }
  }

  const ready = call("load", { base });
  window.encdec = {
    ready,
    download: null,
    /** A Promise of the translations of `lines` (an array of strings), in order. */
    async translate(lines, options = {}) {
      checkLines(lines);
      await ready;
      const { source, target, numBeams, maxNewTokens, noRepeatNgramSize, glossary } = options;
      return call("translate", { lines, options: { source, target, numBeams, maxNewTokens, noRepeatNgramSize,
                                                   glossary } });
    },
    /** A Promise of each line's source ids (</s> included; a multilingual model's source language token first, from
     * options.source), as the model reads them; an over-long line or a bad language rejects. */
    async encode(lines, options = {}) {
      checkLines(lines);
      await ready;
      const { source, target } = options;
      return call("encode", { lines, options: { source, target } });
    },
    addEventListener: (...args) => events.addEventListener(...args),
    removeEventListener: (...args) => events.removeEventListener(...args),
  };
})();
