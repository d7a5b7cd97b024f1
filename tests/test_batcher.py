"""The server's dynamic batcher (encdec.serve.DynamicBatcher) on a long run: it keeps a bounded recent history of
its batches, so a server that runs for months stays flat in memory. A trivial decode stands in for the model."""

from __future__ import annotations

import gc
import tracemalloc

from encdec.serve import RECORD_LENGTH, DecodeOptions, DynamicBatcher, Job

# 20,000 to fill the history twice, then 30,000 more: any object kept per batch (16 bytes or more) would add
# 480 kB, well over the 64 kB allowed
BATCHES = 50_000
WAVE = 1_000  # jobs submitted at a time, each decoded in a batch of its own (max_batch_size 1)


def test_a_long_run_keeps_memory_flat() -> None:
    """50,000 batches: the history holds the last RECORD_LENGTH of them, and the memory that the batcher holds
    after the first 20,000 (by then its history is full and has turned over) no longer grows."""
    decoded = [0]

    def decode(jobs: list[Job]) -> list[int]:
        decoded[0] += len(jobs)
        return [len(job.source_ids) for job in jobs]

    batcher = DynamicBatcher(decode, max_batch_size=1, max_wait_ms=0)
    options = DecodeOptions()

    def run(batches: int) -> None:
        for _ in range(batches // WAVE):
            futures = batcher.submit([Job([3, 4], options, budget=1) for _ in range(WAVE)])
            assert [future.result(timeout=60) for future in futures] == [2] * WAVE

    tracemalloc.start()
    batcher.start()
    try:
        run(2 * RECORD_LENGTH)
        gc.collect()
        warm = tracemalloc.get_traced_memory()[0]
        run(BATCHES - 2 * RECORD_LENGTH)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - warm
    finally:
        batcher.stop()
        tracemalloc.stop()
    assert decoded[0] == BATCHES and batcher.record[-1] == 1
    assert len(batcher.record) == len(batcher.batches) == RECORD_LENGTH
    assert grown < 64 * 1024, f"{grown} bytes more after {BATCHES} batches"
