"""The library reads no environment: only ``knowledge_store.surfaces`` (the CLI and the
servers) turns ``KS_*`` variables into parameters (``surfaces/environment.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from knowledge_store.errors import InvalidRequest
from knowledge_store.surfaces import environment

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "knowledge_store"
ENV_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def environment_uses(source: str) -> list[int]:
    """Lines of ``source`` that touch the process environment (``os.environ``, ``getenv`` …)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in ENV_NAMES for alias in node.names)
        ):
            found.append(node.lineno)
    return sorted(found)


def test_the_checker_finds_every_spelling() -> None:
    source = (
        "import os\nfrom os import getenv\n"
        "a = os.environ.get('X')\nb = os.getenv('Y')\nos.environ['Z'] = '1'\nc = os.sep\n"
    )
    assert environment_uses(source) == [2, 3, 4, 5]


def test_no_module_outside_the_surfaces_reads_the_environment() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if "surfaces" not in path.relative_to(PACKAGE).parts
        and (lines := environment_uses(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, (
        "the library reads no environment: take a parameter and map the variable in"
        f" knowledge_store/surfaces/environment.py; found {offenders}"
    )


def test_the_cli_and_servers_map_the_variables_onto_settings(tmp_path: Path) -> None:
    env = {
        "KS_AS": "user:sam",
        "KS_EMBEDDER": "hash:64",
        "KS_PG_LEXICAL": "ts_rank_cd",
        "KS_PG_KEEP_RUNNING": "1",
        "KS_ONNX_DEVICE": "CPU",
        "KS_ONNX_THREADS": "3",
        "KS_ONNX_CACHE": str(tmp_path / "onnx"),
        "KS_EMBEDDINGS_API_KEY": "sekret",
        "KS_EMBED_WINDOW_MS": "4",
        "KS_GRAPH_TIME_LIMIT_MS": "2000",
    }
    assert environment.identity(None, env).principal == "user:sam"
    assert environment.identity("user:x", env).principal == "user:x"
    assert environment.embedder_spec(env) == "hash:64"
    engine = environment.engine_settings(env)
    assert (engine.lexical_ranker, engine.keep_server) == ("ts_rank_cd", True)
    assert engine.graph_time_limit_s == 2.0
    embedder = environment.embedder_settings(env)
    assert (embedder.device, embedder.threads, embedder.api_key) == ("cpu", 3, "sekret")
    assert embedder.onnx_cache == tmp_path / "onnx"
    assert environment.embed_window_s(env) == pytest.approx(0.004)


def test_unset_variables_give_the_library_defaults(tmp_path: Path) -> None:
    assert environment.identity(None, {}).principal == "everyone"
    assert environment.embedder_spec({}) is None
    engine = environment.engine_settings({"KS_PG_KEEP_RUNNING": "0"})
    assert (engine.lexical_ranker, engine.keep_server) == (None, False)
    assert engine.graph_time_limit_s == 0.25
    embedder = environment.embedder_settings({})
    assert (embedder.device, embedder.threads, embedder.onnx_cache) == ("auto", None, None)
    assert environment.embedder_settings({"XDG_CACHE_HOME": str(tmp_path)}).onnx_cache == (
        tmp_path / "knowledge-store" / "onnx"
    )
    assert environment.embed_window_s({"KS_EMBED_WINDOW_MS": ""}) is None
    assert environment.embed_window_s({"KS_EMBED_WINDOW_MS": "0"}) == 0.0
    assert environment.embedder_settings({"KS_ONNX_THREADS": " "}).threads is None


def test_a_bad_device_names_the_variable() -> None:
    with pytest.raises(Exception, match="KS_ONNX_DEVICE='tpu' is not one of: auto, cpu, gpu"):
        environment.embedder_settings({"KS_ONNX_DEVICE": "tpu"})


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5", "³"])
def test_a_bad_thread_count_names_the_variable_instead_of_being_ignored(value: str) -> None:
    with pytest.raises(InvalidRequest, match=f"KS_ONNX_THREADS={value!r} is not a whole number"):
        environment.embedder_settings({"KS_ONNX_THREADS": value})


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_a_bad_graph_time_limit_names_the_variable(value: str) -> None:
    with pytest.raises(InvalidRequest, match=f"KS_GRAPH_TIME_LIMIT_MS={value!r} is not a whole"):
        environment.engine_settings({"KS_GRAPH_TIME_LIMIT_MS": value})


@pytest.mark.parametrize("value", ["soon", "-5", "nan", "inf"])
def test_a_bad_batching_window_names_the_variable_instead_of_being_ignored(value: str) -> None:
    with pytest.raises(InvalidRequest, match=f"KS_EMBED_WINDOW_MS={value!r} is not a number"):
        environment.embed_window_s({"KS_EMBED_WINDOW_MS": value})
