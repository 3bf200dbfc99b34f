"""`LLM.chat` and the tokenizer read `chat_template.jinja` (as transformers 5 saves it)
as well as tokenizer_config.json's `chat_template`; the .jinja file wins."""

from __future__ import annotations

import json
from pathlib import Path

from augserve.engine.make_model import make_model
from augserve.engine.tokenizer import Tokenizer

MSGS = [{"role": "user", "content": "hi"}]


def test_chat_template_jinja_is_read(tmp_path: Path) -> None:
    d = make_model("llama", "tiny", tmp_path / "m")
    assert Tokenizer(d).apply_chat_template(MSGS) == "<|user|>\nhi\n<|assistant|>\n"  # none
    cfg_path = d / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "chat_template": "CFG {{ messages[0].content }}"}))
    assert Tokenizer(d).apply_chat_template(MSGS) == "CFG hi"
    (d / "chat_template.jinja").write_text("JINJA {{ messages[0].content }}")
    tok = Tokenizer(d)
    assert tok.apply_chat_template(MSGS) == "JINJA hi" and tok.chat_template.startswith("JINJA")
