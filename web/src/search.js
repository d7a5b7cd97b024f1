// Greedy and beam search over a Seq2SeqRunner, equal to transformers' `generate()` for these models (what
// `encdec translate` runs): greedy takes the argmax of each step's logits (the first on a tie, as torch.argmax);
// beam search is transformers' vectorised beam search (GenerationMixin._beam_search, transformers 5), for one
// source at a time: at each step the 2K best continuations of the K beams by summed log-probability, the best K
// not ending in </s> run on, those of the top K that end in </s> (or reach the budget) join the finished
// hypotheses, scored log p / (new tokens) ** length_penalty, and the search ends as its early-stopping rule says.
// Three logits processors run, in transformers' order: no_repeat_ngram_size (NoRepeatNGramLogitsProcessor: a token
// that would complete an n-gram the sequence already holds, its start token included, is never chosen), the
// model's bad_words_ids (NoBadWordsLogitsProcessor: a banned sequence is never completed; an imported Marian model
// bans its pad token) and its forced_eos_token_id (ForcedEOSTokenLogitsProcessor: the last token a budget allows is
// </s>); `encdec export --format web` refuses a generation config that would need any other. A multilingual model's
// target language token is forced as the first generated token (transformers' ForcedBOSTokenLogitsProcessor,
// `forced_bos_token_id`): every other token's score is -inf at that step.

const NEG = -1.0e9;  // transformers' "never chosen" score
const f32 = Math.fround;  // scores are accumulated in float32, as torch does

/** log_softmax of row `b` of (B, V) logits, in float32. */
function logSoftmax(logits, b, vocab) {
  const row = logits.subarray(b * vocab, (b + 1) * vocab);
  let max = -Infinity;
  for (const x of row) if (x > max) max = x;
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const shift = max + Math.log(sum);
  return Float32Array.from(row, (x) => x - shift);
}

/** The tokens that would repeat an n-gram of `seq` (start token included) if they came next; none for n < 1. */
export function bannedTokens(seq, n) {
  const banned = new Set();
  if (!(n >= 1) || seq.length + 1 < n) return banned;
  const prefix = seq.slice(seq.length - n + 1).join(",");
  for (let i = 0; i + n <= seq.length; i++) {
    if (seq.slice(i, i + n - 1).join(",") === prefix) banned.add(seq[i + n - 1]);
  }
  return banned;
}

/**
 * The tokens `badWords` (the rules' bad_words_ids) forbid after `seq` (start token included): a one-token sequence's
 * always, a longer one's last token where `seq` ends with the rest of it.
 */
export function badWordTokens(seq, badWords) {
  const banned = new Set();
  for (const words of badWords) {
    const prefix = words.slice(0, -1), at = seq.length - prefix.length;
    if (at >= 0 && prefix.every((id, i) => seq[at + i] === id)) banned.add(words.at(-1));
  }
  return banned;
}

/** `seq`'s banned next tokens: the repeated n-grams' and the bad words'. */
function bannedAfter(seq, noRepeatNgramSize, badWords) {
  const banned = bannedTokens(seq, noRepeatNgramSize);
  for (const token of badWordTokens(seq, badWords)) banned.add(token);
  return banned;
}

/** Indices of the `k` largest `scores`, best first; a tie keeps the lower index first. */
function topK(scores, k) {
  const best = [];  // a sorted list of indices: k is small (2 x beams)
  for (let i = 0; i < scores.length; i++) {
    if (best.length === k && scores[i] <= scores[best[k - 1]]) continue;
    let at = best.length;
    while (at > 0 && scores[i] > scores[best[at - 1]]) at--;
    best.splice(at, 0, i);
    if (best.length > k) best.pop();
  }
  return best;
}

/**
 * Greedy search over a batch: each row runs until </s> or its own budget.
 * @param runner a Seq2SeqRunner  @param sources each source's ids  @param budgets each source's max new tokens
 * @param noRepeatNgramSize no n-gram of this many tokens twice (0: off)  @param forced the first token (null: none)
 * @param badWords sequences never completed  @param forcedEos the last token of a full budget, the lowest of these
 *   (null: none)
 * @returns each source's output ids, </s> kept when reached (the forced token first)
 */
export async function greedy(runner, sources, budgets,
                             { start, eos, noRepeatNgramSize = 0, forced = null, badWords = [], forcedEos = null }) {
  let { memory, state } = await runner.encode(sources);
  let live = sources.map((_, i) => i);  // the sources still decoding, in the order of the rows
  const outputs = sources.map(() => []);
  let tokens = live.map(() => start);
  while (live.length > 0) {
    const step = await runner.step(memory, state, tokens);
    const keep = [];
    tokens = [];
    live.forEach((source, row) => {
      const logits = step.logits.subarray(row * step.vocab, (row + 1) * step.vocab);
      const banned = bannedAfter([start, ...outputs[source]], noRepeatNgramSize, badWords);
      let next = -1;
      for (let v = 0; v < step.vocab; v++) {
        if (!banned.has(v) && (next < 0 || logits[v] > logits[next])) next = v;
      }
      if (forced !== null && outputs[source].length === 0) next = forced;
      if (forcedEos !== null && outputs[source].length === budgets[source] - 1) next = forcedEos[0];
      outputs[source].push(next);
      if (next !== eos && outputs[source].length < budgets[source]) {
        keep.push(row);
        tokens.push(next);
      }
    });
    if (keep.length === 0) break;
    state = step.state;
    if (keep.length < live.length) {  // drop the finished rows
      memory = runner.gather(memory, keep);
      state = runner.gather(state, keep);
    }
    live = keep.map((row) => live[row]);
  }
  return outputs;
}

/**
 * Beam search for one source, as GenerationMixin._beam_search with batch size 1 and one </s> id.
 * @param budget max new tokens  @param lengthPenalty @param earlyStopping the generation config's (false, true or
 *   "never")  @param noRepeatNgramSize no n-gram of this many tokens twice (0: off)  @param forced the first
 *   token (null: none)  @param badWords sequences never completed  @param forcedEos the tokens the last step of a
 *   full budget allows (null: any)
 * @returns the best hypothesis' ids, </s> kept when reached (the forced token first)
 */
export async function beam(runner, source, budget, numBeams, { start, eos, lengthPenalty, earlyStopping,
                                                               noRepeatNgramSize = 0, forced = null, badWords = [],
                                                               forcedEos = null }) {
  const K = numBeams, keepK = 2 * K, maxLength = 1 + budget, prompt = 1;
  const encoded = await runner.encode([source]);
  const memory = runner.gather(encoded.memory, new Array(K).fill(0));
  let state = runner.gather(encoded.state, new Array(K).fill(0));
  let running = Array.from({ length: K }, () => [start]);
  let runningScores = Array.from({ length: K }, (_, k) => (k === 0 ? 0 : NEG));
  let finished = Array.from({ length: K }, () => [start]);
  let finishedScores = new Array(K).fill(NEG);
  let isFinished = new Array(K).fill(false);
  let improvable = true;  // transformers' is_early_stop_heuristic_unsatisfied
  for (let length = prompt; ; length++) {
    const step = await runner.step(memory, state, running.map((seq) => seq.at(-1)));
    const V = step.vocab;
    const total = new Float32Array(K * V);  // (K x V) summed log-probabilities
    for (let k = 0; k < K; k++) {
      const logp = logSoftmax(step.logits, k, V);
      for (const v of bannedAfter(running[k], noRepeatNgramSize, badWords)) logp[v] = -Infinity;
      if (forced !== null && length === prompt) logp.fill(-Infinity)[forced] = 0;
      if (forcedEos !== null && length === maxLength - 1) {  // the step that fills the budget
        logp.fill(-Infinity);
        for (const v of forcedEos) logp[v] = 0;
      }
      for (let v = 0; v < V; v++) total[k * V + v] = f32(logp[v] + runningScores[k]);
    }
    const candidates = topK(total, keepK).map((i) => {
      const parent = Math.floor(i / V), token = i % V;
      return { parent, seq: [...running[parent], token], score: total[i],
               done: token === eos || length + 1 >= maxLength };
    });
    // the K best candidates not finished run on
    const next = topK(candidates.map((c) => f32(c.score + (c.done ? NEG : 0))), K).map((i) => candidates[i]);
    // the top K that finished join the finished hypotheses, if they can still improve them
    const full = isFinished.every(Boolean) && earlyStopping === true;
    const newScores = candidates.map((c, i) => {
      let score = f32(c.score / (length + 1 - prompt) ** lengthPenalty);
      if (full) score = f32(score + NEG);
      if (!improvable) score = f32(score + NEG);
      if (!(c.done && i < K)) score = f32(score + NEG);
      return score;
    });
    const mergedSeqs = [...finished, ...candidates.map((c) => c.seq)];
    const mergedScores = [...finishedScores, ...newScores];
    const mergedFinished = [...isFinished, ...candidates.map((c, i) => c.done && i < K)];
    const best = topK(mergedScores, K);
    finished = best.map((i) => mergedSeqs[i]);
    finishedScores = best.map((i) => mergedScores[i]);
    isFinished = best.map((i) => mergedFinished[i]);
    running = next.map((c) => c.seq);
    runningScores = next.map((c) => f32(c.score + (c.done ? NEG : 0)));
    // the early-stopping heuristic, after the step (cur_len + 1)
    const hypothetical = earlyStopping === "never" && lengthPenalty > 0 ? maxLength - prompt : length + 1 - prompt;
    const bestPossible = f32(runningScores[0] / hypothetical ** lengthPenalty);
    const worst = Math.min(...finishedScores);
    improvable = improvable && isFinished.some((done) => bestPossible > (done ? worst : NEG));
    const openBeam = !(isFinished.every(Boolean) && earlyStopping === true);
    if (!improvable || !openBeam || candidates.every((c) => c.done)) break;
    state = runner.gather(step.state, next.map((c) => c.parent));
  }
  return finished[0].slice(1);
}

/** An output's ids up to and including the first </s>. */
export function untilEos(ids, eos) {
  const at = ids.indexOf(eos);
  return at < 0 ? ids : ids.slice(0, at + 1);
}
