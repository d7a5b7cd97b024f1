"""The APIs of `encdec serve` are adapters over one serving core (encdec.serve.adapter, encdec.serve.apis): a toy API
added in this file and one line (its entry in ``apis.ADAPTERS``) translates on the test app what the native API
translates, with its own prefix, CORS headers and error shape, beside the native and LibreTranslate APIs; and no code
of the server outside LibreTranslate's folder refers to it, but the list of APIs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from encdec.serve import RequestError, ServeLimits, apis
from encdec.serve.adapter import Adapter
from encdec.serve.core import Plan, translate_parts
from encdec.serve.limits import Overloaded
from encdec.serve.server import create_app, load_models
from encdec_cli import build_parser
from test_serve import Server, request
from tiny_model_folders import build_model_folders

SERVE = Path(__file__).resolve().parents[1] / "src" / "encdec" / "serve"


class ToyAPI(Adapter):
    """``POST /toy/translate`` ``{"sentences": [...], "pair": "de-en"}`` -> ``{"output": [...]}``; errors as
    ``{"problem": ...}``."""

    prefix = "/toy"
    cors = {"Access-Control-Allow-Origin": "https://toy.example"}

    def mount(self, app) -> None:
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
    monkeypatch.setattr(apis, "ADAPTERS", [*apis.ADAPTERS, apis.API(__name__, "a toy API (under /toy/)")])
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
    """``encdec serve --help`` says what each listed API is, in the list's words."""
    monkeypatch.setattr(apis, "ADAPTERS", [*apis.ADAPTERS, apis.API(__name__, "a toy API (under /toy/)")])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    summary = " ".join(capsys.readouterr().out.split())
    assert [api.summary in summary for api in apis.ADAPTERS] == [True] * 3
    assert "LibreTranslate's API (under /libretranslate/)" in summary


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


def test_no_code_of_the_server_outside_its_folder_names_libretranslate_but_the_list_of_apis() -> None:
    modules = [path for path in SERVE.rglob("*.py") if "libretranslate" not in path.relative_to(SERVE).parts]
    assert len(modules) > 10 and SERVE / "apis.py" in modules
    naming = sorted(str(path.relative_to(SERVE)) for path in modules
                    if any("libretranslate" in name.lower() for name in code_names(path)))
    assert naming == ["apis.py"]
