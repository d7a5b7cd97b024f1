"""The serve section: `encdec serve` under concurrent clients, with dynamic batching and without.

Two `encdec serve` processes run the demo Transformer (`runs/demo-transformer` from `make demo`, or one trained
here from the demo config when that folder is absent): one batching (`--max-batch-size 32`), one not
(`--max-batch-size 1`). Clients are threads of this process, each with its own keep-alive HTTP connection, sending
one held-out date per request with the model's default decoding (greedy, as the demo config sets). For 1, 8 and 32
concurrent clients: sentences/s over the whole burst, and the p50 / p95 latency of single requests. The two servers
are measured in alternation, the order reversed each round, and the median round is reported.

    python scripts/benchmark.py --sections serve        # SERVE_MODEL=DIR picks another model folder
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from encdec.data import make_date_pairs

from .common import BenchmarkSettings, Section

logger = logging.getLogger(__name__)

CONCURRENCY = (1, 8, 32)
REQUESTS = {1: 200, 8: 400, 32: 640}  # per burst, split evenly over the clients
ROUNDS = 3
MODES = (("batching (--max-batch-size 32)", "32"), ("no batching (--max-batch-size 1)", "1"))
TRAIN_DEMO = ("from pathlib import Path; import sys; from encdec.recipes.demo import demo_config; "
              "from encdec.training import train; train(demo_config('transformer', Path(sys.argv[1]), None))")


def demo_model(tmp: Path) -> Path:
    """The demo Transformer folder: SERVE_MODEL, else runs/demo-transformer, else trained here (1-2 minutes)."""
    chosen = Path(os.environ.get("SERVE_MODEL", "runs/demo-transformer"))
    if (chosen / "model.safetensors").is_file():
        return chosen
    logger.info("serve: %s absent, training the demo Transformer", chosen)
    subprocess.run([sys.executable, "-c", TRAIN_DEMO, str(tmp)], check=True)
    return tmp / "demo-transformer"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model: Path, max_batch_size: str, threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    process = subprocess.Popen([sys.executable, "-m", "encdec", "serve", "--model", str(model), "--port", str(port),
                                "--max-batch-size", max_batch_size, "--log-level", "warning"], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"encdec serve --model {model} did not start")


def post(connection: http.client.HTTPConnection, text: str) -> None:
    connection.request("POST", "/translate", body=json.dumps({"text": text}),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"serve benchmark: HTTP {response.status}: {body[:200]!r}")


def client(port: int, texts: list[str], start: threading.Barrier) -> list[float]:
    """Open a connection (one un-timed request), wait for the other clients, then send ``texts`` one request at a
    time; the latency of each."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    post(connection, texts[0])
    start.wait()
    latencies = []
    for text in texts:
        began = time.perf_counter()
        post(connection, text)
        latencies.append(time.perf_counter() - began)
    connection.close()
    return latencies


def burst(port: int, texts: list[str], clients: int) -> dict[str, float]:
    """Every client sends its share of ``texts`` at once: sentences/s and latency percentiles."""
    shares = [texts[k::clients] for k in range(clients)]
    began = []
    start = threading.Barrier(clients + 1, action=lambda: began.append(time.perf_counter()))
    with ThreadPoolExecutor(clients) as pool:
        chunks = [pool.submit(client, port, share, start) for share in shares]
        start.wait()  # every client connected: the burst starts now
        latencies = [t for chunk in chunks for t in chunk.result()]
    elapsed = time.perf_counter() - began[0]
    cuts = statistics.quantiles(latencies, n=20)  # 5 % steps: cuts[9] is p50, cuts[18] p95
    return {"throughput": len(texts) / elapsed, "p50": cuts[9] * 1000, "p95": cuts[18] * 1000}


def serve(settings: BenchmarkSettings) -> Section:
    texts = [source for source, _ in make_date_pairs(max(REQUESTS.values()), seed=2024)]
    results: dict[tuple[int, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = demo_model(Path(tmp))
        servers = [start_server(model, size, settings.threads) for _, size in MODES]
        try:
            for _, port in servers:
                burst(port, texts[:64], 8)  # warm-up
            for round_ in range(ROUNDS):
                for clients in CONCURRENCY:
                    order = list(enumerate(servers)) if round_ % 2 == 0 else list(reversed(list(enumerate(servers))))
                    for mode, (_, port) in order:
                        logger.info("serve: round %d, %d clients, %s", round_ + 1, clients, MODES[mode][0])
                        results.setdefault((mode, clients), []).append(
                            burst(port, texts[:REQUESTS[clients]], clients))
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(timeout=60)
    return Section("encdec serve: dynamic batching under concurrent clients", method_text(settings, model),
                   table(results))


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    return sorted(runs, key=lambda run: run["throughput"])[len(runs) // 2]


def table(results: dict[tuple[int, int], list[dict[str, float]]]) -> str:
    lines = ["| Clients | Server | Sentences/s | x no batching | p50 latency (ms) | p95 latency (ms) |",
             "|---:|---|---:|---:|---:|---:|"]
    for clients in CONCURRENCY:
        base = median_run(results[(1, clients)])["throughput"]
        for mode, (name, _) in enumerate(MODES):
            run = median_run(results[(mode, clients)])
            ratio = f"**{run['throughput'] / base:.2f}**" if mode == 0 and clients == 32 else \
                f"{run['throughput'] / base:.2f}"
            lines.append(f"| {clients} | {name} | {run['throughput']:.0f} | {ratio} | {run['p50']:.1f} | "
                         f"{run['p95']:.1f} |")
    return "\n".join(lines)


def method_text(settings: BenchmarkSettings, model: Path) -> str:
    return (
        f"The demo Transformer (`{model.name}`: d_model 128, 2 + 2 layers, greedy, at most 16 new tokens), served "
        f"by two `python -m encdec serve` processes with OMP_NUM_THREADS={settings.threads}: one with dynamic "
        "batching (`--max-batch-size 32 --max-wait-ms 10`, the defaults) and one with `--max-batch-size 1`. The "
        "clients are threads of the benchmark process on loopback, one keep-alive connection each (opened by an "
        "un-timed request before the burst starts), one held-out date per request. "
        f"A burst is {', '.join(f'{REQUESTS[c]} requests from {c} clients' for c in CONCURRENCY)}; "
        "sentences/s = requests / the burst's wall time, and the latencies are those of single requests. "
        f"Each figure is the median of {ROUNDS} rounds (by throughput), the two servers alternating, the order "
        "reversed each round. On 2 cores the clients share the CPU with the server, which costs both modes alike."
    )
