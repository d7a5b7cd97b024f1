// A site's model, as `encdec translate` runs a model folder: the tokenizer, the ONNX runner, and the decoding rules
// the export wrote in encdec_decoding.json (src/encdec/ship/web_export.py: the model's defaults as encdec resolves
// them, decoding_options.py), which this file reads and restates none of:
// - a blank line translates to "" without running the model;
// - a source longer than the model takes (min(tokenizer model_max_length, max_position_embeddings) tokens, </s>
//   included) is refused, naming its line;
// - the budget of new tokens: maxNewTokens if asked, else the model's default, else the rules' `budget` (per source
//   token, plus extra) within max_position_embeddings - 1 (each source its own, as `encdec translate --batch-size 1`);
// - numBeams: as asked, else the model's default, up to the rules' max_beams; 1 is greedy search, more is beam
//   search with the model's length penalty and early stopping;
// - noRepeatNgramSize: as asked, else the model's default, within the rules' bounds; 0 is off;
// - the model's bad_words_ids and forced_eos_token_ids (an imported Marian model's: its pad token is never generated,
//   </s> ends a full budget) apply to every translation, as generate() applies them;
// - a glossary is refused: its terms go in through the model's attention (encdec.glossary), which the graphs lack;
// - a multilingual model (the rules' `languages`) needs a source and a target language, each one of its own: the
//   source is built by the rules' `source_template` (`__SRC__ text </s>`), the target's token is forced as the first
//   generated token and dropped from the text; a language token typed in a line is refused; a bilingual model takes
//   no language, or only the pair its card names.
import { SubwordTokenizer } from "./tokenizer.js";
import { Seq2SeqRunner } from "./runner.js";
import { beam, greedy, untilEos } from "./search.js";

// sources per greedy batch: padding never changes a source's output in float32; int8 graphs quantize their
// activations with one scale per tensor (ONNX Runtime's dynamic quantization), so a source's batch-mates would change
// its output: int8 decodes one source at a time, as `encdec translate --batch-size 1`
const GREEDY_BATCH = { float32: 16, int8: 1 };

export async function fetchJson(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

/** A file's bytes; `received(n)`, when given, is told of each chunk's n bytes as they arrive. */
export async function fetchBytes(url, received = null) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  if (!received || !response.body) return new Uint8Array(await response.arrayBuffer());
  const chunks = [];
  for (const reader = response.body.getReader(); ;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received(value.length);
  }
  const bytes = new Uint8Array(chunks.reduce((size, chunk) => size + chunk.length, 0));
  chunks.reduce((at, chunk) => { bytes.set(chunk, at); return at + chunk.length; }, 0);
  return bytes;
}

const SOURCE_PARTS = new Set(["source_language", "text", "eos"]);  // what a rules' `source_template` may hold

export class Translator {
  /**
   * The model of the export folder at `base` (a URL ending in "/").
   * @param rules its encdec_decoding.json  @param bytes what fetches its files (fetchBytes, or one that counts)
   */
  static async load(ort, base, rules, bytes = fetchBytes) {
    const read = async (name) => JSON.parse(new TextDecoder().decode(await bytes(new URL(name, base))));
    const [manifest, config, tokenizerJson, tokenizerConfig] = await Promise.all(
      ["encdec_onnx.json", "config.json", "tokenizer.json", "tokenizer_config.json"].map(read));
    const runner = await Seq2SeqRunner.load(ort, base, manifest, bytes);
    return new Translator(runner, new SubwordTokenizer(tokenizerJson, tokenizerConfig), config, rules);
  }

  constructor(runner, tokenizer, config, rules) {
    Object.assign(this, { runner, tokenizer, config, rules, defaults: rules.defaults });
    const manifest = runner.manifest;
    this.positions = config.max_position_embeddings ?? Infinity;
    this.maxSourceTokens = manifest.max_source_tokens
      ?? Math.min(tokenizer.tokenizer.config.model_max_length ?? Infinity, this.positions);
    this.tokens = { start: manifest.decoder_start_token_id, eos: manifest.eos_token_id };  // start: <s>, or pad
    this.generationRules = { badWords: rules.bad_words_ids ?? [], forcedEos: rules.forced_eos_token_ids ?? null };
    this.languages = rules.languages ?? null;  // a multilingual model's codes, token ids and source template
    const unknown = (this.languages?.source_template ?? []).filter((part) => !SOURCE_PARTS.has(part));
    if (unknown.length) throw new Error(`encdec_decoding.json: unknown source_template part ${unknown[0]}`);
  }

  /** What the page shows and checks against. */
  info() {
    const manifest = this.runner.manifest;
    return { family: manifest.family, weights: manifest.weights, numBeams: this.defaults.num_beams,
             maxBeams: this.rules.max_beams, maxSourceTokens: this.maxSourceTokens,
             maxNewTokens: Number.isFinite(this.positions) ? this.positions - 1 : null,
             languages: this.languages?.codes ?? null, page: this.rules.page ?? null,
             downloadBytes: this.rules.download?.bytes ?? null };
  }

  /**
   * The language token ids of a direction, {source, target} (null for a bilingual model, and for a target not asked
   * for when `needTarget` is false); a missing or unknown language is refused naming the model's languages, and so is
   * a language given to a bilingual model, unless it names the pair its card names.
   */
  direction({ source, target } = {}, needTarget = true) {
    const given = (code) => code !== undefined && code !== null;
    if (!this.languages) {
      const pair = this.rules.page?.languages ?? [];
      const named = pair.length === 2 && (source ?? pair[0]) === pair[0] && (target ?? pair[1]) === pair[1];
      if ((given(source) || given(target)) && !named) {
        throw new RangeError(pair.length === 2
          ? `this model translates ${pair[0]} into ${pair[1]} alone: leave out source and target, or give those.`
          : "this model is bilingual (it has no language tokens) and takes no source or target: leave them out.");
      }
      return { source: null, target: null };
    }
    const { codes, token_ids: ids } = this.languages;
    const id = (which, code) => {
      if (!given(code)) {
        if (which === "target" && !needTarget) return null;
        throw new RangeError(`${which} is missing: this model translates between ${codes.join(", ")}; pass `
                             + "{source, target}, each one of them.");
      }
      if (typeof code !== "string" || !Object.hasOwn(ids, code)) {
        throw new RangeError(`unknown ${which} language ${JSON.stringify(code)}: this model's languages are `
                             + `${codes.join(", ")}.`);
      }
      return ids[code];
    };
    return { source: id("source", source), target: id("target", target) };
  }

  /**
   * Line `i`'s source ids: the tokenizer's (</s> appended), or a multilingual model's `source_template` filled; a
   * language token typed in the text is refused (the languages are chosen, not typed).
   */
  sourceIds(line, sourceId, i) {
    if (sourceId === null) return this.tokenizer.encode(line);
    const text = this.tokenizer.encodeText(line);
    const typed = Object.entries(this.languages.token_ids).find(([, id]) => text.includes(id));
    if (typed) {
      throw new RangeError(`line ${i + 1} holds the language token of ${typed[0]}: the languages are chosen with `
                           + "source and target, not typed in the text; remove it.");
    }
    const parts = { source_language: [sourceId], text, eos: [this.tokens.eos] };
    return this.languages.source_template.flatMap((part) => parts[part]);
  }

  /**
   * Each line's source ids, </s> included ([] for a blank line); an over-long line is refused, and so is a bad
   * direction (`direction`; a multilingual model's source starts with its language token).
   */
  encode(lines, languages = {}) {
    const { source } = this.direction(languages, false);
    return lines.map((line, i) => {
      if (!line.trim()) return [];
      const ids = this.sourceIds(line, source, i);
      if (ids.length > this.maxSourceTokens) {
        throw new RangeError(`line ${i + 1} has ${ids.length} tokens; the model takes at most `
                             + `${this.maxSourceTokens} (</s> included): shorten it or split it.`);
      }
      return ids;
    });
  }

  /** The options asked, checked, with the model's defaults filled in. */
  options({ numBeams, maxNewTokens, noRepeatNgramSize, glossary } = {}) {
    if (glossary !== undefined) {  // its terms go in through the model's attention, which the site's graphs do not give
      throw new RangeError("glossary: this site cannot put terms in (its graphs give no alignment); use `encdec "
                           + "translate --glossary` or the server's `glossary`.");
    }
    const beams = numBeams ?? this.defaults.num_beams, maxBeams = this.rules.max_beams;
    if (!Number.isInteger(beams) || beams < 1 || beams > maxBeams) {
      throw new RangeError(`numBeams must be a whole number from 1 to ${maxBeams}, got ${numBeams}.`);
    }
    const limit = this.info().maxNewTokens;
    const budget = maxNewTokens ?? this.defaults.max_new_tokens;
    if (budget !== null && (!Number.isInteger(budget) || budget < 1 || (limit !== null && budget > limit))) {
      throw new RangeError(`maxNewTokens must be a whole number from 1 to ${limit ?? "any"}, got ${maxNewTokens}.`);
    }
    const ngram = noRepeatNgramSize ?? this.defaults.no_repeat_ngram_size;
    const [low, high] = this.rules.bounds.no_repeat_ngram_size;
    if (!Number.isInteger(ngram) || ngram < low || ngram > high) {
      throw new RangeError(`noRepeatNgramSize must be a whole number from ${low} to ${high}, got ${noRepeatNgramSize}.`);
    }
    return { numBeams: beams, maxNewTokens: budget, noRepeatNgramSize: ngram };
  }

  budget(sourceLength, maxNewTokens) {
    const { per_source_token: perToken, extra } = this.rules.budget;
    return maxNewTokens ?? Math.min(perToken * sourceLength + extra, this.positions - 1);
  }

  /** The translations of `lines`, in order (see the module comment). */
  async translate(lines, asked) {
    const { numBeams, maxNewTokens, noRepeatNgramSize } = this.options(asked);
    const forced = this.direction(asked).target;
    const sources = this.encode(lines, asked);
    const outputs = sources.map(() => []);
    const todo = sources.map((ids, i) => i).filter((i) => sources[i].length > 0);
    const budgets = sources.map((ids) => this.budget(ids.length, maxNewTokens));
    if (numBeams === 1) {
      const size = GREEDY_BATCH[this.runner.manifest.weights] ?? 1;
      for (let at = 0; at < todo.length; at += size) {
        const batch = todo.slice(at, at + size);
        const found = await greedy(this.runner, batch.map((i) => sources[i]), batch.map((i) => budgets[i]),
                                   { ...this.tokens, ...this.generationRules, noRepeatNgramSize, forced });
        batch.forEach((i, k) => { outputs[i] = found[k]; });
      }
    } else {
      const settings = { ...this.tokens, ...this.generationRules, lengthPenalty: this.defaults.length_penalty,
                         earlyStopping: this.defaults.early_stopping, noRepeatNgramSize, forced };
      for (const i of todo) outputs[i] = await beam(this.runner, sources[i], budgets[i], numBeams, settings);
    }
    return outputs.map((ids) => (ids.length ? this.tokenizer.decode(untilEos(ids, this.tokens.eos)) : ""));
  }
}
