"""Speed and memory of encdec's models against transformers' reference implementations, on CPU.

Run by ``scripts/benchmark.py`` (``make benchmark``), which writes docs/benchmarks.md, and partly reused by
``scripts/compare_revisions.py``. Not part of the installed package: the scripts put the repository root on
``sys.path`` and import ``benchmarks.*``.

* ``common``: settings, report sections, workloads (training step, ``generate()``), interleaved timing, paired
  ratios, peak memory in a fresh process;
* ``transformer``: encdec's Transformer against ``MarianMTModel`` (the ``transformer`` section);
* ``rnn``: the RNN encoder-decoder, every attention type (the ``rnn`` section);
* ``report``: [`SECTIONS`], the environment and method, merging with an earlier report, [`run_benchmarks`];
* ``soak``: `encdec serve` under thousands of mixed requests, its memory sampled (``scripts/benchmark_soak.py``,
  which writes its section of docs/serving.md).
"""
