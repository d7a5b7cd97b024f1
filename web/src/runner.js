// The exported model run with ONNX Runtime Web (https://onnxruntime.ai/docs/tutorials/web/), generic over the
// manifest `encdec_onnx.json` (docs/fast-inference.md, "ONNX Runtime", what is exported): the same code runs the
// Transformer and the LSTM/GRU family, since the manifest names every tensor the decoder reads and carries from
// step to step.
//
// Shapes: B rows (sources, or sources x beams), S source length, V vocabulary. Every tensor is batch-first, so
// expanding a source to its beams and reordering beams are one gather of rows (axis 0) for every tensor.

/** `tensor` with rows `rows` of its axis 0, in that order: (B, ...) -> (rows.length, ...). */
export function gatherRows(ort, tensor, rows) {
  const [batch, ...rest] = tensor.dims;
  const width = batch === 0 ? 0 : tensor.data.length / batch;
  const data = new tensor.data.constructor(rows.length * width);
  rows.forEach((row, i) => data.set(tensor.data.subarray(row * width, (row + 1) * width), i * width));
  return new ort.Tensor(tensor.type, data, [rows.length, ...rest]);
}

/** (B, S) int64 ids right-padded with `pad`, and the attention mask (1 = token, 0 = pad). */
export function paddedBatch(ort, rows, pad) {
  const width = Math.max(...rows.map((ids) => ids.length));
  const ids = new BigInt64Array(rows.length * width).fill(BigInt(pad));
  const mask = new BigInt64Array(rows.length * width);
  rows.forEach((row, b) => row.forEach((id, s) => {
    ids[b * width + s] = BigInt(id);
    mask[b * width + s] = 1n;
  }));
  return [new ort.Tensor("int64", ids, [rows.length, width]), new ort.Tensor("int64", mask, [rows.length, width])];
}

export class Seq2SeqRunner {
  /**
   * @param ort the onnxruntime-web module  @param manifest encdec_onnx.json
   * @param encoder @param decoder the two InferenceSessions
   */
  constructor(ort, manifest, encoder, decoder) {
    Object.assign(this, { ort, manifest, encoder, decoder });
    this.state = manifest.state;
    this.encoderInputs = manifest.decoder.encoder_inputs;
  }

  /** Both graphs of the export at `base` (a URL of the folder), read as bytes and opened single-threaded. */
  static async load(ort, base, manifest, fetchBytes) {
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
    const [encoder, decoder] = await Promise.all([manifest.encoder.file, manifest.decoder.file].map(
      async (file) => ort.InferenceSession.create(await fetchBytes(new URL(file, base)), options)));
    return new Seq2SeqRunner(ort, manifest, encoder, decoder);
  }

  /**
   * The encoder over a batch of sources: what every decoder step reads (the encoder outputs it takes and the
   * source mask), and the first step's state (each entry empty along its grow axis, or an encoder output).
   * @param sources each source's ids, </s> included
   */
  async encode(sources) {
    const [inputIds, attentionMask] = paddedBatch(this.ort, sources, this.manifest.pad_token_id);
    const outputs = await this.encoder.run({ input_ids: inputIds, attention_mask: attentionMask });
    const memory = { encoder_attention_mask: attentionMask };
    for (const name of this.encoderInputs) memory[name] = outputs[name];
    const state = {};
    for (const entry of this.state) {
      state[entry.past] = entry.init === "empty" ? this.empty(entry, sources.length) : outputs[entry.init];
    }
    return { memory, state };
  }

  /** A zero-length past for `entry`: its shape with B rows and 0 along its grow axis. */
  empty(entry, rows) {
    const dims = entry.shape.map((size, axis) => {
      if (axis === 0) return rows;
      if (axis === entry.grow_axis) return 0;
      if (typeof size !== "number") throw new Error(`state ${entry.name}: axis ${axis} has no size (${size})`);
      return size;
    });
    return new this.ort.Tensor("float32", new Float32Array(0), dims);  // every state tensor is float32
  }

  /**
   * One decoder step: the next token of each row.
   * @param memory @param state as `encode` gives them (B rows each)
   * @param tokens each row's last token (B)
   * @returns {{logits: Float32Array, vocab: number, state: object}} logits (B, V) of the new position, and the
   *   state after it (present.X becomes past.X)
   */
  async step(memory, state, tokens) {
    const inputIds = new this.ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [tokens.length, 1]);
    const feeds = { input_ids: inputIds, ...memory, ...state };
    const wanted = Object.fromEntries(this.decoder.inputNames.map((name) => [name, feeds[name]]));
    const outputs = await this.decoder.run(wanted);
    const next = {};
    for (const entry of this.state) next[entry.past] = outputs[entry.present];
    const { data, dims } = outputs.logits;  // (B, T, V), T = 1
    const [rows, length, vocab] = dims;
    const last = new Float32Array(rows * vocab);
    for (let b = 0; b < rows; b++) {
      last.set(data.subarray((b * length + length - 1) * vocab, (b * length + length) * vocab), b * vocab);
    }
    return { logits: last, vocab, state: next };
  }

  /** Every tensor of `memory` or `state` with rows `rows` (beam expansion and reordering). */
  gather(tensors, rows) {
    return Object.fromEntries(Object.entries(tensors).map(([name, t]) => [name, gatherRows(this.ort, t, rows)]));
  }
}
