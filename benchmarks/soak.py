"""The soak: `encdec serve` under thousands of mixed requests of both its APIs, its memory read as they go.

One ``python -m encdec serve`` process on 127.0.0.1 (``--port 0``, its address read from its start-up line) serves
two small models, de-en and en-de (the folders given, else two trained here on dates for a moment, as the test
suite's), behind a key database with one key of a high request limit, with ``--char-limit`` and ``--metrics`` on,
so that every check a request passes runs. A few client threads of this process, each with its own keep-alive
connection, send the requests in shuffled cycles of ``KINDS``:

- the native ``POST /translate``: one text, and a list of three;
- LibreTranslate's ``POST /libretranslate/translate``: one text, a list of three, HTML (``format: html``), and
  ``source: auto``; its ``POST /libretranslate/detect``;
- its ``POST /libretranslate/translate_file`` of a .txt, .html, .docx (python-docx) and .odt (odfdo) file made in
  memory, each followed by the ``GET`` of the translated file (a download is a request of the count).

Before the first request, and after every ``every`` answers, the resident memory (RSS) of the server's process and
of any process it started is read with psutil. The verdict is the growth of their sum from the sample at
``warmup`` requests to the last. The run is bounded by its request count and a deadline; every request by a
timeout. A 5xx, a request without an answer (a connection the server dropped or refused, a timeout), an upload answered
without its file's URL, a traceback in the server's log, or a server that died fails it.
Statuses of 4xx are counted and shown, not failed: a server with new limits still soaks.
"""

from __future__ import annotations

import collections
import contextlib
import html
import http.client
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import docx
import odfdo
import psutil

from encdec.serve.keys import KeyDatabase

ROOT = Path(__file__).resolve().parent.parent
LT = "/libretranslate"
TEXT_KINDS = ("native", "native list", "text", "text list", "html", "auto", "detect")
FILES = (".txt", ".html", ".docx", ".odt")
KINDS = (*TEXT_KINDS, *FILES)  # one cycle: 11 jobs, 15 requests with the downloads
DOWNLOAD = "download"
NO_ANSWER, NO_FILE_URL = 0, -1  # the statuses recorded for a request without an answer, an upload's 200 without URL
PAIRS = ("de-en", "en-de")
KEY_REQ_LIMIT = 1_000_000  # requests a minute: never the limit that answers
CHAR_LIMIT = 2_000  # characters: above any text (and any request) sent here, so the check runs and passes
VARIANTS = 8  # files of each format and source language, made once and uploaded in turn
SENTENCES = {
    "de": ["Der Zug nach Hamburg fährt heute später ab.", "Kannst du mir bitte das Salz reichen?",
           "Wir haben am Wochenende einen langen Spaziergang gemacht.", "Die Besprechung ist am 3. März 2021.",
           "Meine Schwester arbeitet in einer kleinen Buchhandlung.", "Das Wetter ist heute viel zu schön.",
           "Der Bäcker an der Ecke verkauft die besten Brötchen.", "Am 12. Mai 1999 hat es geregnet."],
    "en": ["The train to Hamburg leaves later today.", "Could you please pass me the salt?",
           "We went for a long walk at the weekend.", "The meeting is on March 3, 2021.",
           "My sister works in a small bookshop.", "The weather is far too nice today.",
           "The baker on the corner sells the best bread rolls.", "It rained on 12 May 1999."],
}
# the models, as the test suite's `pairs` fixture trains them (tests/ on the path: its tiny model folders)
BUILD = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]); "
         "from tiny_model_folders import DATE_RNN, DATE_TRANSFORMER, date_data, save_folder, train_on_dates; "
         "dates = date_data(); root = Path(sys.argv[1]); "
         "save_folder(train_on_dates(DATE_TRANSFORMER, dates, 150, 3e-3), dates[0], root / 'de-en'); "
         "save_folder(train_on_dates(DATE_RNN, dates, 150, 5e-3), dates[0], root / 'en-de')")
STARTED = re.compile(r"model\(s\) loaded.* on (http://127\.0\.0\.1:\d+)")
SERVER_FAULT = re.compile(r"Traceback|\bERROR\b|Exception in ASGI")


def build_models(root: Path, timeout: float = 900) -> list[str]:
    """``--model`` values of two small date models trained under ``root`` (about a minute on 2 busy cores)."""
    subprocess.run([sys.executable, "-c", BUILD, str(root), str(ROOT / "tests")], check=True, timeout=timeout)
    return [f"{pair}={root / pair}" for pair in PAIRS]


def add_key(database: Path) -> str:
    """A new key of ``database`` (created), allowed ``KEY_REQ_LIMIT`` requests a minute, as ``encdec keys add``
    adds it (here, not in a process of its own that would load torch again)."""
    keys = KeyDatabase(database)
    try:
        return keys.add(KEY_REQ_LIMIT).key
    finally:
        keys.close()


class ServerProcess:
    """``encdec serve --port 0`` as a subprocess: a thread reads its output (the last lines kept, and the lines that
    show a fault inside it counted); ``url`` comes from its start-up line."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.pop("ENCDEC_API_KEY", None)
        self.process = subprocess.Popen([sys.executable, "-m", "encdec", "serve", "--host", "127.0.0.1", "--port",
                                         "0", "--log-level", "warning", *args], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        self.url: str | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=60)
        self.faults: list[str] = []  # the first lines that show a fault (a traceback, an ERROR)
        self.fault_count = 0
        self.announced = threading.Event()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        for line in self.process.stdout:
            self.tail.append(line)
            if SERVER_FAULT.search(line):
                self.fault_count += 1
                if len(self.faults) < 5:
                    self.faults.append(line.rstrip())
            if self.url is None and (found := STARTED.search(line)):
                self.url = found[1]
                self.announced.set()
        self.announced.set()  # the output ended: started or not, nothing more to wait for

    def start(self, timeout: float) -> str:
        """The server's URL once it listens; a RuntimeError with its last lines when it does not in ``timeout``."""
        if not self.announced.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError(f"encdec serve did not start in {timeout:.0f} s:\n{''.join(self.tail)}")
        return self.url

    def alive(self) -> bool:
        return self.process.poll() is None

    def ended(self, within: float = 2.0) -> bool:
        """Whether the server has ended, waiting up to ``within`` seconds for it (``poll`` alone may answer None
        while another thread waits on the process)."""
        try:
            self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return True

    def memory(self) -> dict[str, float]:
        """RSS in MiB of the server's process (``server``) and of the processes it started (``children``, their
        ``count``), and the server's open file descriptors (``files``)."""
        server = psutil.Process(self.process.pid)
        children = []
        for child in server.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # it ended between the listing and the read
                children.append(child.memory_info().rss)
        return {"server": server.memory_info().rss / 2**20, "children": sum(children) / 2**20,
                "count": len(children), "files": server.num_fds()}

    def stop(self) -> int:
        """Stop the server (SIGTERM, then SIGKILL after a minute); its exit status."""
        if self.alive():
            self.process.terminate()
        try:
            status = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait(timeout=60)
        self.reader.join(timeout=60)
        self.process.stdout.close()
        return status


class Client:
    """One keep-alive HTTP connection to the server; a connection the server closed while idle is opened again
    once (a fresh one that fails, or a request unanswered after ``timeout`` seconds, is the server's fault:
    status 0)."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self.connection: http.client.HTTPConnection | None = None

    def send(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body) of one request; status 0 when the connection failed."""
        for _ in range(2):
            fresh = self.connection is None
            if fresh:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.connection.request(method, path, body=body, headers=headers or {})
                response = self.connection.getresponse()
                data = response.read()
                if response.will_close:
                    self.close()
                return response.status, data
            except TimeoutError:  # no answer in time: never sent again
                self.close()
                return 0, b""
            except (http.client.HTTPException, OSError):
                self.close()
                if fresh:
                    return 0, b""
        return 0, b""

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body of ``fields`` and the file ``name`` of ``data``, and its Content-Type."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
             for key, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def a_docx(heading: str, lines: list[str]) -> bytes:
    document = docx.Document()
    document.add_heading(heading, 1)
    mixed = document.add_paragraph(f"{lines[0]} ")
    mixed.add_run(lines[1]).bold = True
    document.add_paragraph(lines[2])
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = lines[3], lines[0]
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def an_odt(heading: str, lines: list[str]) -> bytes:
    document = odfdo.Document("text")
    document.body.clear()
    document.body.append(odfdo.Header(1, heading))
    mixed = odfdo.Paragraph(f"{lines[0]} ")
    mixed.append(odfdo.Span(lines[1], style="Strong_20_Emphasis"))
    document.body.append(mixed)
    document.body.append(odfdo.Paragraph(lines[2]))
    document.body.append(odfdo.Paragraph(lines[3]))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_documents(seed: int) -> dict[tuple[str, str], list[bytes]]:
    """(source language, extension) -> ``VARIANTS`` files of a heading and four sentences, made in memory."""
    rng = random.Random(seed)
    made: dict[tuple[str, str], list[bytes]] = {}
    for language, sentences in SENTENCES.items():
        for _ in range(VARIANTS):
            heading, *lines = rng.sample(sentences, 5)
            escaped = [html.escape(line) for line in lines]
            page = (f"<html><body><h1>{html.escape(heading)}</h1><p>{escaped[0]} <b>{escaped[1]}</b></p>"
                    f"<ul><li>{escaped[2]}</li><li>{escaped[3]}</li></ul></body></html>")
            files = {".txt": "\n".join([heading, *lines]).encode(), ".html": page.encode(),
                     ".docx": a_docx(heading, lines), ".odt": an_odt(heading, lines)}
            for extension, data in files.items():
                made.setdefault((language, extension), []).append(data)
    return made


def text_request(kind: str, pair: str, rng: random.Random, key: str) -> tuple[str, dict, dict[str, str]]:
    """(path, JSON body, headers) of a request of one of ``TEXT_KINDS`` for ``pair``."""
    source, target = pair.split("-")
    texts = SENTENCES[source]
    if kind in ("native", "native list"):
        text = rng.choice(texts) if kind == "native" else rng.sample(texts, 3)
        return "/translate", {"text": text, "source": source, "target": target}, {"X-API-Key": key}
    if kind == "detect":
        return f"{LT}/detect", {"q": rng.choice(texts), "api_key": key}, {}
    body = {"q": rng.choice(texts), "source": source, "target": target, "api_key": key}
    if kind == "text list":
        body["q"] = rng.sample(texts, 3)
    elif kind == "html":
        first, second = rng.sample(texts, 2)
        body.update(q=f"<p>{html.escape(first)} <b>{html.escape(second)}</b></p>", format="html")
    elif kind == "auto":
        body["source"] = "auto"
    return f"{LT}/translate", body, {}


@dataclass
class Job:
    kind: str
    pair: str
    seed: int


def run_job(client: Client, job: Job, key: str, documents: dict) -> list[tuple[str, int, float]]:
    """Send ``job``'s request (an upload and, once it is answered 200, the download of its file): (kind, status,
    seconds) of each."""
    rng = random.Random(job.seed)
    began = time.perf_counter()
    if job.kind in FILES:
        source, target = job.pair.split("-")
        data = rng.choice(documents[(source, job.kind)])
        body, content_type = multipart({"source": source, "target": target, "api_key": key}, f"soak{job.kind}", data)
        status, answer = client.send("POST", f"{LT}/translate_file", body, {"Content-Type": content_type})
        done = [(job.kind, status, time.perf_counter() - began)]
        if status == 200:
            began = time.perf_counter()
            try:
                path = urlsplit(json.loads(answer)["translatedFileUrl"]).path
            except (ValueError, KeyError, TypeError, AttributeError):
                return [(job.kind, NO_FILE_URL, done[0][2]), (DOWNLOAD, NO_FILE_URL, 0.0)]
            status, _ = client.send("GET", path)
            done.append((DOWNLOAD, status, time.perf_counter() - began))
        return done
    path, body, headers = text_request(job.kind, job.pair, rng, key)
    status, _ = client.send("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})
    return [(job.kind, status, time.perf_counter() - began)]


@dataclass
class Tally:
    """What was sent, by kind: the statuses and the latencies; and the memory samples."""

    statuses: dict[str, collections.Counter] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the client threads add at once

    def add(self, kind: str, status: int, seconds: float) -> None:
        with self.lock:
            self.statuses.setdefault(kind, collections.Counter())[status] += 1
            self.seconds.setdefault(kind, []).append(seconds)

    def failed(self) -> collections.Counter:
        """Requests not answered 2xx, by status (0: no answer)."""
        with self.lock:
            return sum((collections.Counter({s: n for s, n in counts.items() if not 200 <= s < 300})
                        for counts in self.statuses.values()), collections.Counter())


@dataclass
class SoakSettings:
    requests: int = 5_000
    clients: int = 4
    every: int = 500  # answers between memory samples
    warmup: int = 1_000  # the verdict's growth is from the sample at this many requests
    time_limit: float = 1_800.0  # seconds for the requests; the run stops there (and fails)
    request_timeout: float = 120.0
    seed: int = 0
    server_args: tuple[str, ...] = ()  # more `encdec serve` options (a new limit, --threads ...)
    kinds: tuple[str, ...] = KINDS  # the mix: a subset tells which kind of request the memory grows with


class Schedule:
    """The jobs handed to the client threads: shuffled cycles of ``kinds``, each for a random pair, until
    ``requests`` are reserved (a file reserves two: its upload and its download; where one is left, a text kind of
    the cycle takes it) or ``deadline`` passes. Each answer is reported to ``answered``, which samples the memory
    every ``every`` answers."""

    def __init__(self, settings: SoakSettings, deadline: float, sample: Callable[[int], None]) -> None:
        self.kinds, self.requests, self.every = settings.kinds, settings.requests, settings.every
        self.deadline, self.sample = deadline, sample
        self.texts = [kind for kind in self.kinds if kind not in FILES]
        self.rng = random.Random(settings.seed)
        self.lock = threading.Lock()
        self.pending: collections.deque[str] = collections.deque()
        self.reserved = self.answered_count = 0
        self.stopped = ""  # why the schedule stopped early, if it did

    def next(self) -> Job | None:
        with self.lock:
            left = self.requests - self.reserved
            if self.stopped or left <= 0:
                return None
            if time.monotonic() > self.deadline:
                self.stopped = "the time limit"
                return None
            if not self.pending:
                self.pending.extend(self.rng.sample(self.kinds, len(self.kinds)))
            if self.pending[0] in FILES and left < 2:
                if not self.texts:
                    return None
                kind = self.texts[0]
            else:
                kind = self.pending.popleft()
            self.reserved += 2 if kind in FILES else 1
            return Job(kind, self.rng.choice(PAIRS), self.rng.getrandbits(32))

    def answered(self, job: Job, count: int) -> None:
        """``count`` requests of ``job`` answered (an upload refused gives its download's place back)."""
        with self.lock:
            self.reserved -= (2 if job.kind in FILES else 1) - count
            for _ in range(count):
                self.answered_count += 1
                if self.answered_count % self.every == 0:
                    self.sample(self.answered_count)

    def stop(self, reason: str) -> None:
        with self.lock:
            self.stopped = self.stopped or reason


@dataclass
class SoakResult:
    settings: SoakSettings
    tally: Tally
    seconds: float  # the requests' wall time
    exit_status: int | None  # the server's, when it ended by itself during the run; None: it ran to the end
    stopped: str  # why the requests stopped early, if they did
    faults: list[str]  # the first lines of the server's output that show a fault
    fault_count: int


def client_thread(url: str, key: str, schedule: Schedule, tally: Tally, documents: dict, server: ServerProcess,
                  timeout: float) -> None:
    client = Client(url, timeout)
    try:
        while (job := schedule.next()) is not None:
            done = run_job(client, job, key, documents)
            for kind, status, seconds in done:
                tally.add(kind, status, seconds)
            schedule.answered(job, len(done))
            if any(status == NO_ANSWER for _, status, _ in done) and server.ended():
                schedule.stop("the server's death")
    except Exception as error:  # the run stops and fails, saying why, instead of losing a thread's requests
        schedule.stop(f"an error in a client thread: {error!r}")
    finally:
        client.close()


def soak(models: list[str], settings: SoakSettings, workdir: Path) -> SoakResult:
    """Start the server of ``models`` (``--model`` values), send it ``settings.requests`` mixed requests from
    ``settings.clients`` threads, sampling its memory; stop it. ``workdir`` holds the key database."""
    database = workdir / "keys.db"
    key = add_key(database)
    documents = make_documents(settings.seed)
    model_args = [arg for model in models for arg in ("--model", model)]
    server = ServerProcess([*model_args, "--api-keys-db", str(database), "--char-limit", str(CHAR_LIMIT),
                            "--metrics", *settings.server_args])
    tally = Tally()
    try:
        url = server.start(timeout=300)

        def sample(answered: int) -> None:
            with contextlib.suppress(psutil.Error):  # a server that just died: no sample (the run fails anyway)
                tally.samples.append({"requests": answered, **server.memory(), "failed": sum(tally.failed().values())})

        sample(0)
        began = time.monotonic()
        schedule = Schedule(settings, began + settings.time_limit, sample)
        threads = [threading.Thread(target=client_thread, daemon=True,
                                    args=(url, key, schedule, tally, documents, server, settings.request_timeout))
                   for _ in range(settings.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:  # each request has its timeout: a thread ends within one of the deadline
            thread.join(timeout=settings.time_limit + 2 * settings.request_timeout)
        seconds = time.monotonic() - began
        if any(thread.is_alive() for thread in threads):
            schedule.stop("a client that did not finish")
        if tally.samples[-1]["requests"] != schedule.answered_count:
            sample(schedule.answered_count)  # the last answers, when they are not a multiple of `every`
        exit_status = None if server.alive() else server.process.returncode
    finally:
        server.stop()
    return SoakResult(settings, tally, seconds, exit_status, schedule.stopped, server.faults, server.fault_count)


def growth(result: SoakResult) -> tuple[dict[str, float], dict[str, float]] | None:
    """The samples the verdict compares: the first taken at ``warmup`` requests or later (else the one before the
    last), and the last; None without two samples after the first answers."""
    samples = result.tally.samples[1:]
    if len(samples) < 2:
        return None
    warm = [sample for sample in samples[:-1] if sample["requests"] >= result.settings.warmup]
    return (warm[0] if warm else samples[-2]), samples[-1]


def total(sample: dict[str, float]) -> float:
    return sample["server"] + sample["children"]


def verdict(result: SoakResult, check_flat: float | None = None) -> tuple[str, list[str]]:
    """A line that says how the memory grew after the warm-up, and the reasons the run fails (none: it passed).

    What is checked is the server's own process, the one that serves every client for as long as it runs. The
    processes it starts (the document workers) are each replaced after a few dozen documents, their memory returned
    with them, so their sum rises and falls with where each is in its life: the line gives their range after the
    warm-up, and a run fails if they grow in number (a process leak) rather than in size."""
    failures = run_failures(result)
    compared = growth(result)
    if compared is None:
        return "too few memory samples for a verdict", failures + ["too few memory samples"]
    first, last = compared
    grown = last["server"] - first["server"]
    span = last["requests"] - first["requests"]
    after = [sample for sample in result.tally.samples if first["requests"] <= sample["requests"]]
    children = [sample["children"] for sample in after]
    line = (f"server process RSS from request {first['requests']:,} to {last['requests']:,}: {first['server']:,.1f} "
            f"-> {last['server']:,.1f} MiB, {grown:+,.1f} MiB ({grown / span * 1000:+.2f} MiB per 1,000 requests); "
            f"its child processes {min(c['count'] for c in after)} to {max(c['count'] for c in after)}, "
            f"{min(children):,.1f} to {max(children):,.1f} MiB together")
    if max(sample["count"] for sample in after) > first["count"] + 1:
        failures.append(f"the server's child processes grew from {first['count']} to "
                        f"{max(sample['count'] for sample in after)} after the warm-up")
    if check_flat is not None:
        flat = grown <= check_flat
        line += f": {'flat' if flat else 'not flat'} (--check-flat {check_flat:g} MiB)"
        if not flat:
            failures.append(f"the server's RSS grew {grown:+,.1f} MiB after the warm-up, over --check-flat "
                            f"{check_flat:g} MiB")
    return line, failures


def run_failures(result: SoakResult) -> list[str]:
    """The reasons other than memory that fail a run: a 5xx, a request without answer, a dead or faulty server."""
    failures = []
    failed = result.tally.failed()
    server_errors = {status: n for status, n in failed.items() if status >= 500}
    if server_errors:
        failures.append(f"server errors: {', '.join(f'{n} x {s}' for s, n in sorted(server_errors.items()))}")
    if failed.get(NO_ANSWER):
        failures.append(f"{failed[NO_ANSWER]} request(s) got no answer (connection dropped or refused, or timed out)")
    if failed.get(NO_FILE_URL):
        failures.append(f"{failed[NO_FILE_URL] // 2} file upload(s) answered 200 without a translatedFileUrl")
    if result.exit_status is not None:
        failures.append(f"the server died during the run (exit status {result.exit_status})")
    if result.fault_count:
        failures.append(f"{result.fault_count} line(s) of the server's log show a fault, the first: "
                        f"{result.faults[0]!r}")
    if result.stopped:
        failures.append(f"the requests stopped early, at {result.stopped}")
    return failures


def memory_table(result: SoakResult) -> str:
    lines = ["| Requests | Server RSS (MiB) | Child processes | Their RSS (MiB) | Total (MiB) | Open files | "
             "Not 2xx so far |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for s in result.tally.samples:
        lines.append(f"| {s['requests']:,} | {s['server']:,.1f} | {s['count']} | {s['children']:,.1f} | "
                     f"{total(s):,.1f} | {s['files']} | {s['failed']:,} |")
    return "\n".join(lines)


def kinds_table(result: SoakResult) -> str:
    names = {"native": "native `/translate`, one text", "native list": "native `/translate`, three texts",
             "text": "LT `/translate`, one text", "text list": "LT `/translate`, three texts",
             "html": "LT `/translate`, HTML", "auto": "LT `/translate`, `source: auto`", "detect": "LT `/detect`",
             **{ext: f"LT `/translate_file`, {ext}" for ext in FILES}, DOWNLOAD: "LT `/download_file`"}
    lines = ["| Request | Sent | 2xx | Other statuses | p50 (ms) | p95 (ms) |", "|---|---:|---:|---|---:|---:|"]
    for kind in (*KINDS, DOWNLOAD):
        counts = result.tally.statuses.get(kind)
        if not counts:
            continue
        ok = sum(n for s, n in counts.items() if 200 <= s < 300)
        labels = {NO_ANSWER: "no answer", NO_FILE_URL: "no file URL"}
        other = ", ".join(f"{n} x {labels.get(s, s)}" for s, n in sorted(counts.items()) if not 200 <= s < 300)
        seconds = sorted(result.tally.seconds[kind])
        p95 = seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))]
        lines.append(f"| {names[kind]} | {sum(counts.values()):,} | {ok:,} | {other or '-'} | "
                     f"{statistics.median(seconds) * 1000:.0f} | {p95 * 1000:.0f} |")
    return "\n".join(lines)


def markdown(result: SoakResult, line: str) -> str:
    """The tables and the verdict line."""
    sent = sum(sum(counts.values()) for counts in result.tally.statuses.values())
    return (f"{memory_table(result)}\n\n{kinds_table(result)}\n\n{sent:,} requests from {result.settings.clients} "
            f"clients in {result.seconds:,.0f} s. **{line}.**")
