"""The default model is SmolLM2, fetched once through pip and checked against pinned
sha256s; without a network the fetch fails in one line and the server falls back to the
embedded random model; a bad download never lands in the cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from augserve.engine import smollm2
from augserve.engine.resolve import cache_root
from augserve.server import default_model as dm


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("AUGSERVE_SMOLLM2_WHEEL", raising=False)


def test_no_network_is_one_line_and_the_default_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(smollm2.ModelUnavailable, match="could not fetch SmolLM2") as e:
        smollm2.ensure_smollm2_gguf()
    assert "\n" not in str(e.value)
    assert not list((cache_root() / "smollm2").iterdir())  # nothing half-written
    monkeypatch.setitem(dm.RECIPE, "preset", "tiny")
    with caplog.at_level("WARNING", logger="augserve.server"):
        path, names = dm.default_model()
    assert names == ["augserve-default"] and path.name.startswith("default-model-")
    assert "serving the random-weight embedded model instead" in caplog.text
    monkeypatch.setenv(dm.DEFAULT_MODEL_ENV, "nonsense")
    with pytest.raises(ValueError, match="AUGSERVE_DEFAULT_MODEL"):
        dm.default_model()


def test_a_wheel_with_the_wrong_checksum_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / smollm2.WHEEL
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr(smollm2.MEMBER, b"GGUF not really")
    monkeypatch.setenv("AUGSERVE_SMOLLM2_WHEEL", str(fake))
    with pytest.raises(smollm2.ModelUnavailable, match="does not match the pinned one"):
        smollm2.ensure_smollm2_gguf()
    assert not (cache_root() / "smollm2" / Path(smollm2.MEMBER).name).exists()


def test_the_default_is_smollm2_with_a_tool_template(smollm2_gguf: Path) -> None:
    from augserve.engine.chat import ChatTemplate
    from augserve.engine.tool_parsers import detect_tool_parser

    # the session's cached file stands in for the download (same checksum check)
    d = smollm2.smollm2_model_dir(smollm2_gguf.parent.parent)
    tpl = ChatTemplate.from_model_dir(d)
    assert tpl.source == smollm2.SMOLLM2_TEMPLATE and detect_tool_parser(tpl.source) == "hermes"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    text = tpl.render([{"role": "user", "content": "Weather in Paris?"}], tools=tools)
    assert "get_weather" in text and "<tool_call>" in text and "SmolLM" in text
