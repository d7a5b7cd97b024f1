"""The APIs of `encdec serve` are adapters over one serving core (encdec.serve.adapter, encdec.serve.apis): a toy API
added in this file and one line (its entry in ``apis.ADAPTERS``) translates on the test app what the native API
translates, with its own prefix, CORS headers and error shape, beside the native and LibreTranslate APIs; it adds a
flag of its own to `encdec serve` from this same file (its flags module), which reaches its adapter as its settings;
and no code of the package or the command line outside LibreTranslate's folder refers to LibreTranslate, but the
list of APIs."""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from encdec.errors import EncdecError
from encdec.serve import RequestError, ServeLimits, apis
from encdec.serve.adapter import Adapter
from encdec.serve.core import Plan, translate_parts
from encdec.serve.limits import Overloaded
from encdec.serve.server import create_app, load_models
from encdec_cli import build_parser
from test_serve import Server, request
from tiny_model_folders import build_model_folders

SRC = Path(__file__).resolve().parents[1] / "src"
SERVE = SRC / "encdec" / "serve"
TOY = apis.API(__name__, "a toy API (under /toy/)", __name__)  # its adapter and its flags: this file
CHAR_LIMIT = "a greeting of the toy API"  # what --char-limit counts in the toy API (its flags module's)


@dataclass(frozen=True)
class ToySettings:
    greeting: str = "hello"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """The toy API's flags module (``TOY.flags``): its one flag."""
    group.add_argument("--toy-greeting", default="hello", help="what GET /toy/greeting answers")


def settings(args: argparse.Namespace) -> dict:
    """The toy API's settings (``ToySettings``' keyword arguments) from ``encdec serve``'s arguments."""
    return {"greeting": args.toy_greeting}


class ToyAPI(Adapter):
    """``POST /toy/translate`` ``{"sentences": [...], "pair": "de-en"}`` -> ``{"output": [...]}``; errors as
    ``{"problem": ...}``."""

    prefix = "/toy"
    cors = {"Access-Control-Allow-Origin": "https://toy.example"}
    Settings = ToySettings

    def mount(self, app) -> None:
        @app.get("/toy/greeting")
        async def greeting() -> JSONResponse:
            return JSONResponse({"greeting": self.settings.greeting})

        @app.post("/toy/translate")
        async def translate(request: Request) -> JSONResponse:
            body = await request.json()
            served = self.serving.models.pick(*body["pair"].split("-"))
            found = await translate_parts(served, self.serving.batchers[served.name], body["sentences"],
                                          Plan(max_pieces=2))
            return JSONResponse({"output": [texts[0] for texts in found]})

    def refused(self, request, error: RequestError) -> JSONResponse:
        return JSONResponse({"problem": f"{error.field.replace('text', 'sentences')}: {error.reason}"}, 400)

    def overloaded(self, request, error: Overloaded) -> JSONResponse:
        return JSONResponse({"problem": error.message}, error.status, headers=error.headers)


ADAPTER = ToyAPI


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return build_model_folders(tmp_path_factory.mktemp("adapters"))


def test_a_toy_api_is_one_class_and_one_line(folders, monkeypatch) -> None:
    monkeypatch.setattr(apis, "ADAPTERS", [*apis.ADAPTERS, TOY])
    models = load_models([f"de-en={folders['transformer']}"], limits=ServeLimits(max_new_tokens=6))
    sentences = ["3 March 2021", "12/1/1999"]
    with Server(create_app(models)) as server:
        toy = request(f"{server.url}/toy/translate", {"sentences": sentences, "pair": "de-en"})
        native = request(f"{server.url}/translate", {"text": sentences, "split_sentences": True})
        libre = request(f"{server.url}/libretranslate/translate", {"q": sentences, "source": "de", "target": "en"})
        too_many = request(f"{server.url}/toy/translate", {"sentences": ["1 May", "2 May", "3 May"], "pair": "de-en"})
    assert toy[0] == native[0] == libre[0] == 200
    assert toy[1]["output"] == [t["text"] for t in native[1]["translations"]] == libre[1]["translatedText"]
    assert toy[2]["access-control-allow-origin"] == "https://toy.example"
    assert "access-control-allow-origin" not in native[2]  # each API's headers on its own paths only
    assert libre[2]["access-control-allow-origin"] == "*"
    assert too_many[:2] == (400, {"problem": "sentences: 3 sentences exceed the limit of 2 per request; send them in "
                                             "several requests."})


def test_serve_s_help_names_every_api_of_the_list(monkeypatch, capsys) -> None:
    """``encdec serve --help`` says what each listed API is, in the list's words, and lists each API's flags under
    its summary; ``--char-limit`` says what each counts."""
    monkeypatch.setattr(apis, "ADAPTERS", [*apis.ADAPTERS, TOY])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    summary = " ".join(capsys.readouterr().out.split())
    assert [api.summary in summary for api in apis.ADAPTERS] == [True] * len(apis.ADAPTERS)
    assert "LibreTranslate's API (under /libretranslate/)" in summary
    assert "a toy API (under /toy/): --toy-greeting TOY_GREETING what GET /toy/greeting answers" in summary
    assert ("LibreTranslate's API (under /libretranslate/): --max-file-bytes MAX_FILE_BYTES largest file that "
            "LibreTranslate's /translate_file takes (default 10 MB)") in summary
    assert ("--char-limit N characters a text of the native API, or a request of LibreTranslate's (all its texts), "
            "or a greeting of the toy API, may have") in summary


def test_a_toy_api_s_flag_reaches_its_adapter_as_its_settings(folders, monkeypatch) -> None:
    """The toy API's flag, parsed by `encdec serve`'s parser, becomes its settings (``apis.settings_from``, as
    ``cmd_serve`` does) and reaches its adapter; ``create_app`` also takes them as keywords named as its
    ``Settings``' fields; a keyword that no API takes, or a wrong setting of LibreTranslate's, is refused."""
    monkeypatch.setattr(apis, "ADAPTERS", [*apis.ADAPTERS, TOY])
    args = build_parser().parse_args(["serve", "--model", "m", "--toy-greeting", "servus", "--max-file-bytes", "9"])
    given = apis.settings_from(args)
    assert given[__name__] == {"greeting": "servus"}
    assert given["encdec.serve.libretranslate"]["files"]["max_file_bytes"] == 9
    models = load_models([f"de-en={folders['transformer']}"], limits=ServeLimits(max_new_tokens=6))
    with Server(create_app(models, api_settings=given)) as server:
        by_flag = request(f"{server.url}/toy/greeting")
        lt = request(f"{server.url}/libretranslate/frontend/settings")
    with Server(create_app(models, greeting="hi")) as server:
        by_keyword = request(f"{server.url}/toy/greeting")
    with Server(create_app(models)) as server:
        by_default = request(f"{server.url}/toy/greeting")
    assert [answer[1] for answer in (by_flag, by_keyword, by_default)] == [{"greeting": "servus"},
                                                                           {"greeting": "hi"}, {"greeting": "hello"}]
    assert lt[1]["suggestions"] is False
    with pytest.raises(TypeError, match=r"no API of encdec serve takes the settings \['colour'\]"):
        create_app(models, colour="red")
    with pytest.raises(EncdecError, match="--suggestions stores the suggestions in the key database"):
        create_app(models, suggestions=True)


def code_names(path: Path) -> set[str]:
    """Every name, attribute, imported module and string of a module's code, its docstrings and comments left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.alias | ast.Attribute | ast.ImportFrom):
            found.add(str(getattr(node, "id", None) or getattr(node, "name", None) or getattr(node, "attr", None)
                          or getattr(node, "module", None)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.add(node.value)
    return found


def test_no_code_outside_its_folder_names_libretranslate_but_the_list_of_apis() -> None:
    """Every module of the package and the command line (``src/encdec``, ``src/encdec_cli``), its code only."""
    modules = [path for path in SRC.rglob("*.py") if SERVE / "libretranslate" not in path.parents]
    assert len(modules) > 50 and {SERVE / "apis.py", SRC / "encdec_cli" / "parser.py"} <= set(modules)
    naming = sorted(str(path.relative_to(SRC)) for path in modules
                    if any("libretranslate" in name.lower() for name in code_names(path)))
    assert naming == ["encdec/serve/apis.py"]
