"""Run one `encdec` command in this process and print the peaks of its own memory and of its mapped file pages.

Peak RSS (what `ru_maxrss` and the benchmark tables give) counts the pages of memory-mapped files that were read,
which the operating system drops when memory runs short, as well as the process's own memory. This splits the two:
`RssAnon` and `RssFile` of /proc/self/status (Linux), sampled every 50 ms. docs/training-data.md ("Memory") has the
figures it gave, e.g.:

    python benchmarks/memory_probe.py train configs/multi30k-transformer-small.yaml --training.max_steps 1 ...
"""

from __future__ import annotations

import sys
import threading
import time

FIELDS = ("RssAnon", "RssFile", "VmRSS")


def watch(peaks: dict[str, int], every: float = 0.05) -> None:
    while True:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                name = line.split(":")[0]
                if name in peaks:
                    peaks[name] = max(peaks[name], int(line.split()[1]))
        time.sleep(every)


def main() -> None:
    peaks = dict.fromkeys(FIELDS, 0)
    threading.Thread(target=watch, args=(peaks,), daemon=True).start()
    from encdec_cli import main as encdec

    sys.argv = ["encdec", *sys.argv[1:]]
    try:
        encdec()
    finally:
        print("peak MiB: " + ", ".join(f"{name} {kib / 1024:,.0f}" for name, kib in peaks.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
