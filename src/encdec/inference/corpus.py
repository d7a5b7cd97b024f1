"""Corpus-scale translation: ``encdec translate`` over a whole file or a pipe, on the chunked-job machinery of
``encdec.chunked`` (streamed in chunks, with progress, resumable after a crash, shared out over processes).

The most common offline job in NMT is translating a whole corpus: back-translation of monolingual text (Sennrich et
al. 2016), sequence-level distillation of a teacher into a student (Kim and Rush 2016), a dataset. ``translate_file``
is that job: what a line becomes in the output (``TranslationOutput``: the translation, or Moses's n-best fields), the
record a resume compares (the input, the models and the options), and the model loaded once per process.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import field
from typing import Any

from ..chunked import Chunk, ChunkFile, Progress, StreamOutput, file_identity, open_chunks, run_chunks
from ..decoding_options import TRANSLATE, asked_of, asks_list, declared, recorded
from ..errors import EncdecError
from ..folders import model_identity
from ..io_utils import refuse_overlap, require_file
from ..processes import Shard, on_main
from . import CHUNK_SIZE, load_engine
from .decoding import DecodeOptions, Engine, Hypothesis, decode_lines, resolve_options
from .sentences import decode_split


class OutputForm:
    """What each input line becomes in ``encdec translate``'s output (``TranslationOutput``): its translation, or with
    an n-best list, ``scores`` or ``alignments`` the fields ``[ID |||] HYPOTHESIS [||| SCORE] [||| ALIGNMENT]`` (ID:
    the 0-based input line; up to n lines of them per input line, Moses's n-best format, the best
    log P(hypothesis | input) first; see ``translate_detailed``); with ``split_sentences``, each line's translation
    put together from its sentences' (``sentences.decode_split``)."""

    @property
    def detailed(self) -> bool:
        return self.listed or self.scores or self.alignments

    @property
    def listed(self) -> bool:
        """Whether an n-best list was asked: each line then starts with its input line's ID."""
        return asks_list(asked_of(self, TRANSLATE))

    def options(self, generation_config: Any, **decoding: Any) -> DecodeOptions:
        """The decoding options of ``encdec translate``: ``decoding`` (``translate``'s, ``decoding_options``) and
        this output's n-best list (ranked by log P), scores and alignments, resolved against the model's generation
        config (``decoding.resolve_options``)."""
        return resolve_options(generation_config, ranked=True, **asked_of(self, TRANSLATE), **decoding)

    def chunk(self, engine: Engine, tokenizer: Any, chunk: Chunk, options: DecodeOptions, batch_size: int = 32,
              truncate: bool = False) -> str:
        """The output text of one chunk (every line ended)."""
        if self.split_sentences is not None:  # one translation per line (inference.sentences)
            lines = decode_split(engine, tokenizer, chunk.lines, options, self.split_sentences or None, batch_size)
            return "".join(line + "\n" for line in lines)
        results = decode_lines(engine, tokenizer, chunk.lines, options, batch_size, truncate)
        if not self.detailed:
            return "".join(hypotheses[0].text + "\n" for hypotheses in results)
        return "".join(self.line(chunk.start + i, hypothesis) + "\n"
                       for i, hypotheses in enumerate(results) for hypothesis in hypotheses)

    def line(self, index: int, hypothesis: Hypothesis) -> str:
        fields = [str(index)] if self.listed else []
        fields.append(hypothesis.text)
        if self.scores:
            fields.append("" if hypothesis.score is None else f"{hypothesis.score:.4f}")
        if self.alignments:
            fields.append(hypothesis.alignment or "")
        return " ||| ".join(fields)


# The options of ``encdec translate``'s output (each one its front end ``TRANSLATE`` offers, ``decoding_options``:
# the n-best list, scores, alignments), and ``split_sentences``: a language ("": not known) whose rules cut each line
# into sentences, or None.
TranslationOutput = dataclasses.make_dataclass("TranslationOutput", [
    *[(item.name, Any, field(default=item.default)) for item in declared(TRANSLATE)],
    ("split_sentences", str | None, field(default=None))], bases=(OutputForm,))
TranslationOutput.__module__ = __name__


def translate_file(models: list[str], input_path: str | None, output_path: str | None, *,
                   form: TranslationOutput | None = None, chunk_size: int = CHUNK_SIZE, resume: bool = False,
                   overwrite: bool = False, quiet: bool = False, engine: str = "torch", quantize: str | None = None,
                   dtype: str | None = None, stdin: Any = None, stdout: Any = None, **options: Any) -> int:
    """``encdec translate``: the lines of ``input_path`` (or ``stdin``) translated into ``output_path`` (or
    ``stdout``), streamed, resumable and shared out over the processes of a launch (see the module docstring).
    ``models``: one model folder, or several (an ensemble); ``options``: ``translate``'s (the decoding options,
    ``batch_size``, ...). Returns the number of input lines (0: the input was empty, and so is the output)."""
    shard, form = Shard(), form or TranslationOutput()
    if input_path is None and (shard.world > 1 or resume):
        raise EncdecError("--resume and several processes need the input as a file: pass --input FILE.")
    if resume and output_path is None:
        raise EncdecError("--resume needs the output as a file: pass --output FILE.")
    if input_path is not None:
        require_file(input_path, "input file")
    if output_path is not None:
        refuse_overlap(output_path, [path for path in (input_path, *models) if path])
    record = {"options": {**recorded(options), **dataclasses.asdict(form), "engine": engine, "quantize": quantize,
                          "dtype": dtype, "chunk_size": chunk_size}}
    output = on_main(shard, lambda: open_output(output_path, input_path, models, record, resume, overwrite, stdout))
    done = shard.broadcast(output.done_lines if output is not None else 0)
    batch_size, truncate = options.pop("batch_size", 32), options.pop("truncate", False)
    try:  # a run refused before its first chunk leaves nothing behind (ChunkFile.close)
        engine_, tokenizer = load_engine(models if len(models) > 1 else models[0], engine, quantize=quantize,
                                         dtype=dtype, device=shard.device)
        decoding = form.options(engine_.generation_config, model_config=engine_.config, tokenizer=tokenizer,
                                **options)
    except BaseException:
        if output is not None:
            output.close()
        raise
    chunks, total = open_chunks(input_path, chunk_size, skip=done, stdin=stdin)
    progress = Progress("encdec translate", total, initial=done, quiet=quiet or not shard.is_main)
    run_chunks(chunks, lambda chunk: form.chunk(engine_, tokenizer, chunk, decoding, batch_size, truncate), output,
               progress, shard)
    return progress.done


def open_output(output_path: str | None, input_path: str | None, models: list[str], record: dict[str, Any],
                resume: bool, overwrite: bool, stdout: Any) -> ChunkFile | StreamOutput:
    """The main process's output: a resumable file whose record names the input, models and options, or stdout."""
    if output_path is None:
        return StreamOutput(stdout if stdout is not None else sys.stdout)
    record = {"input": file_identity(input_path) if input_path else None,
              "models": [model_identity(model) for model in models], **record}
    return ChunkFile(output_path, record, resume=resume, overwrite=overwrite, input_path=input_path)


__all__ = ["TranslationOutput", "open_output", "translate_file"]
