"""A request's CPU work off the event loop, and the bounds a request body is read within.

The server answers every client from one event loop (uvicorn's): a request that computes on it holds up every other,
``/health`` included. So the CPU work of a request (parsing a JSON body, parsing HTML, cutting texts into sentences,
tokenizing them, detecting a language, putting the translations back together) runs through ``off_loop`` on a pool
of ``CPU_THREADS`` threads of its own, while the loop goes on answering; the pool bounds how many requests compute at
once (the others wait their turn, first come first served) and keeps this work apart from the threads that
``asyncio.to_thread`` lends to other waits. A model's tokenizer is called by one thread at a time
(``service.TranslationService.jobs_for`` holds its lock): a fast tokenizer shared by threads refuses a change of its
truncation while another thread encodes ("Already borrowed").

A JSON body nested deeper than ``MAX_JSON_DEPTH`` is refused before it is parsed (``json_depth``, a linear scan that
skips strings): neither API's body goes deeper than 2, and Python's parser would otherwise recurse until the
interpreter's limit. Text that UTF-8 cannot encode (``lone_surrogate``: JSON's ``"\\ud800"`` escape decodes to half a
surrogate pair) is refused by field on both APIs rather than passed on to code that encodes it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

CPU_THREADS = 4  # requests computing at once; the loop answers the others meanwhile
MAX_JSON_DEPTH = 32  # brackets inside brackets of a JSON body; the APIs' bodies need 2
JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)  # an unterminated one runs to the end
NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
POOL = ThreadPoolExecutor(max_workers=CPU_THREADS, thread_name_prefix="encdec-cpu")

Result = TypeVar("Result")


async def off_loop(function: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """``function(*args, **kwargs)`` on the pool of CPU threads; the event loop goes on answering meanwhile. What it
    raises is raised here."""
    return await asyncio.get_running_loop().run_in_executor(POOL, functools.partial(function, *args, **kwargs))


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (0: none), brackets inside strings not counted; in time
    linear in its length, whether or not it is valid JSON."""
    brackets = JSON_STRING.sub(b"", raw).translate(None, NOT_BRACKETS)
    return max(itertools.accumulate(map(STEP.__getitem__, brackets), initial=0))


def too_deep(raw: bytes) -> str | None:
    """Why a JSON body is refused before it is parsed (nested deeper than ``MAX_JSON_DEPTH``), or None."""
    depth = json_depth(raw)
    return f"nested {depth} deep, over the limit of {MAX_JSON_DEPTH}" if depth > MAX_JSON_DEPTH else None


def lone_surrogate(text: str) -> str | None:
    """What makes ``text`` not Unicode that UTF-8 can encode (a lone surrogate, and where), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"a lone surrogate (U+{ord(text[error.start]):04X}) at character {error.start}"
    return None


__all__ = ["CPU_THREADS", "MAX_JSON_DEPTH", "json_depth", "lone_surrogate", "off_loop", "too_deep"]
