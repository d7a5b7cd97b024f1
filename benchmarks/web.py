"""Translation in the browser (``encdec export --format web``): what the site weighs, how long the page takes to
give its first translation, and how many sentences a second it translates, in headless Chromium.

The site is served by Python's static file server (``http.server``) on 127.0.0.1, which counts the bytes of every
file it sends (what the page fetched: the worker's fetches included, which the browser's own log of the page
misses); Chromium reaches no other host. Times are read in the page with ``performance.now()`` (milliseconds since
the navigation began): the first translation is one sentence translated as soon as ``encdec.ready`` resolves, on a
fresh browser (nothing cached); throughput is one pass over the sentences with ``window.encdec.translate``, greedy
and with beam 5, after that first one. The greedy texts are compared with ``encdec translate`` (torch, float32,
greedy) on the same model folder.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from encdec.inference import translate_lines
from encdec.ship.web_export import export_web, site_bytes

FIRST_TRANSLATION = """
const [line, done] = arguments;
encdec.ready.then(() => encdec.translate([line], {numBeams: 1}))
  .then(() => done(performance.now()), (e) => done('error: ' + e.message));
"""
PASS = """
const [lines, beams, done] = arguments;
const start = performance.now();
encdec.translate(lines, {numBeams: beams})
  .then((out) => done({ms: performance.now() - start, out}), (e) => done({error: e.message}));
"""


@dataclass
class WebFigures:
    site_bytes: dict[str, int]  # runtime, model, total
    fetched_bytes: int  # what the page fetched to give its first translation
    first_translation_ms: float  # from navigation start to the first translation
    sentences: int
    greedy_per_s: float
    beam5_per_s: float
    same_as_torch: int  # greedy lines whose text equals `encdec translate`'s
    same_as_graphs: int  # ... equals `encdec translate --engine onnxruntime` of the site's graphs, a line at a time


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """A static file handler that adds the bytes of each file it sends to ``served`` (a class attribute per
    server, see ``static_site``)."""

    served: list[int]

    def copyfile(self, source, outputfile) -> None:
        start = source.tell()
        super().copyfile(source, outputfile)
        self.served.append(source.tell() - start)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def static_site(site: Path) -> Iterator[tuple[str, list[int]]]:
    """(URL, the byte counts of the files sent so far) of ``site`` served on 127.0.0.1, a free port."""
    served: list[int] = []
    handler = type("Handler", (CountingHandler,), {"served": served})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", served
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


def chromium():
    """Headless Chromium (Debian's `chromium` and `chromium-driver`) that resolves no host but 127.0.0.1."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver") or "chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_script_timeout(3600)
    return driver


def measure_site(site: Path, model_dir: Path, lines: list[str]) -> WebFigures:
    """The figures of the module docstring for ``site``, exported from ``model_dir``, on ``lines``."""
    driver = chromium()
    try:
        with static_site(site) as (url, served):
            driver.get(url)
            first = driver.execute_async_script(FIRST_TRANSLATION, lines[0])
            if isinstance(first, str):
                raise RuntimeError(first)
            fetched = sum(served)
            passes = {beams: driver.execute_async_script(PASS, lines, beams) for beams in (1, 5)}
    finally:
        driver.quit()
    for found in passes.values():
        if "error" in found:
            raise RuntimeError(found["error"])
    expected = translate_lines(str(model_dir), lines, num_beams=1)
    same = sum(a == b for a, b in zip(passes[1]["out"], expected, strict=True))
    # the site's own graphs in ONNX Runtime, a sentence at a time as an int8 site decodes (int8 activations take one
    # scale per batch, so a batch-mate would change a sentence's output)
    graphs = translate_lines(str(site / "model"), lines, batch_size=1, engine="onnxruntime", num_beams=1)
    same_graphs = sum(a == b for a, b in zip(passes[1]["out"], graphs, strict=True))
    rate = {beams: len(lines) / (found["ms"] / 1000) for beams, found in passes.items()}
    return WebFigures(site_bytes(site), fetched, first, len(lines), rate[1], rate[5], same, same_graphs)


def benchmark_web(model_dir: Path, lines: list[str], quantize: str = "int8", site: Path | None = None) -> WebFigures:
    """Export ``model_dir`` to a site (into ``site``, or a temporary folder) and measure it."""
    with tempfile.TemporaryDirectory() as tmp:
        site = export_web(model_dir, site or Path(tmp) / "site", quantize=quantize)
        return measure_site(site, model_dir, lines)


def markdown(figures: WebFigures, model: str, quantize: str) -> str:
    mb = lambda n: f"{n / 1e6:.2f} MB"  # noqa: E731
    size = figures.site_bytes
    rows = [("model", f"{model} ({quantize} weights)"),
            ("site on disk", f"{mb(size['total'])} (runtime {mb(size['runtime'])}, model {mb(size['model'])})"),
            ("fetched by the page", mb(figures.fetched_bytes)),
            ("first translation after load", f"{figures.first_translation_ms / 1000:.2f} s"),
            (f"greedy, {figures.sentences} sentences", f"{figures.greedy_per_s:.1f} sentences/s"),
            (f"beam 5, {figures.sentences} sentences", f"{figures.beam5_per_s:.1f} sentences/s"),
            ("greedy text as `encdec translate` (torch, float32)",
             f"{figures.same_as_torch} of {figures.sentences} lines"),
            ("greedy text as `encdec translate --engine onnxruntime --batch-size 1` of the site's graphs",
             f"{figures.same_as_graphs} of {figures.sentences} lines")]
    return "\n".join(["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])
