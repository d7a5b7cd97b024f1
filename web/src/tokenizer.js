// The model's tokenizer in the browser: tokenizer.json read by tokenizers.js (@huggingface/tokenizers, the pure-JS
// port of Hugging Face `tokenizers` that transformers.js uses), with encdec's conventions around it: a source is
// its subword ids with </s> appended (the TemplateProcessing post-processor; a multilingual model's source is built
// around `encodeText`'s ids by translator.js), and an output is decoded with the special tokens skipped (a language
// token too) and the ends trimmed, as `encdec translate` does (inference/decoding.py).
import { Tokenizer } from "@huggingface/tokenizers";

// Two differences from Rust `tokenizers` (0.2.0, pinned), each undone here and pinned by tests/test_web_site.py:
// - Rust's Punctuation pre-tokenizer with behaviour "isolated" makes every punctuation character a piece
// of its own; tokenizers.js 0.2.0 keeps a run of them together ("!!" one piece), which changes the ids where a
// run is not one vocabulary entry. The same split, written as a Split pre-tokenizer with an explicit pattern,
// splits as Rust does. The character set is Rust's `is_punctuation`: Unicode P* and the ASCII punctuation.
const PUNCTUATION = { Regex: "[\\p{P}!-/:-@\\[-`{-~]" };

/** A pre-tokenizer config with each Punctuation step rewritten as the equivalent Split (see PUNCTUATION). */
export function rustPunctuation(config) {
  if (config === null || typeof config !== "object") return config;
  if (config.type === "Sequence") {
    return { ...config, pretokenizers: config.pretokenizers.map(rustPunctuation) };
  }
  if (config.type !== "Punctuation") return config;
  const behavior = (config.behavior ?? "isolated").toLowerCase();
  if (behavior !== "isolated") {
    throw new Error(`the Punctuation pre-tokenizer with behavior "${config.behavior}" is not supported`);
  }
  return { type: "Split", pattern: PUNCTUATION, behavior: "Isolated", invert: false };
}

/** A model that fuses unknown characters does so within each pre-tokenized piece, as Rust's does. */
function fusePerPiece(model) {
  if (!model.fuse_unk) return;
  const call = model._call.bind(model);
  model._call = (pieces) => pieces.flatMap((piece) => call([piece]));
}

export class SubwordTokenizer {
  /** @param {object} json tokenizer.json  @param {object} config tokenizer_config.json */
  constructor(json, config) {
    this.tokenizer = new Tokenizer({ ...json, pre_tokenizer: rustPunctuation(json.pre_tokenizer) }, config);
    fusePerPiece(this.tokenizer.model);
    // An imported Marian model's tokenizer (MarianImportTokenizer) numbers the SentencePiece pieces that its
    // vocab.json lacks past the vocabulary; MarianTokenizer, and the Python class, read them as <unk>.
    this.vocabSize = config.marian_vocab_size ?? null;
    this.unkId = this.vocabSize === null ? null : this.tokenizer.token_to_id(config.unk_token ?? "<unk>");
  }

  /** Ids past an imported Marian vocabulary as <unk> (see the constructor); others as they are. */
  inVocabulary(ids) {
    return this.vocabSize === null ? ids : ids.map((id) => (id >= this.vocabSize ? this.unkId : id));
  }

  /** A source's ids, </s> included (the post-processor appends it). */
  encode(text) {
    return this.inVocabulary(this.tokenizer.encode(text).ids);
  }

  /** A text's subword ids alone, with no special token. */
  encodeText(text) {
    return this.inVocabulary(this.tokenizer.encode(text, { add_special_tokens: false }).ids);
  }

  /** An output's text: special tokens skipped, ends trimmed (as `encdec translate`). */
  decode(ids) {
    return this.tokenizer.decode(ids, { skip_special_tokens: true }).trim();
  }
}
