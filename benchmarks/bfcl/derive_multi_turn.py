"""Derive the `bfcl-multi-turn` agent workload from BFCL's `multi_turn_base` (run once).

    pip download --no-deps bfcl-eval==2026.3.23 -d /tmp/bfcl
    unzip -q /tmp/bfcl/bfcl_eval-2026.3.23-py3-none-any.whl -d /tmp/bfcl/pkg
    python benchmarks/bfcl/derive_multi_turn.py --bfcl /tmp/bfcl/pkg \\
        --out augserve/data/bfcl/multi_turn_base.json

Each of the 200 entries is a conversation of user turns, and its possible answer is
the calls a correct agent makes in each turn. BFCL ships the simulated APIs those
calls run against (a file system, a trading bot, a travel agency, ...); this script
executes every ground-truth call with BFCL's own executor from the entry's initial
state, so each tool result is the text a correct agent would have read back.

Only token counts leave this script (no BFCL text is copied into the project):

- `system_tokens`: the tools offered, written as augserve's generic tools prompt
  (`engine.tool_prompt.tools_block`, hermes format) from the entry's function docs
  (its involved classes, less its `excluded_function`s);
- per user turn `user_tokens` (the user message) and per call `call_tokens` (the call
  as the model writes it, `<tool_call>{...}</tool_call>`) and `result_tokens` (the
  executed result inside `<tool_response>` markup).

Counts use the project's tokenizer-free rule (`augserve.workload.tokenize`). The
workload (`augserve/workload/bfcl_multi_turn.py`) adds what BFCL does not have: tool
latencies, user think time, the final answer of each turn.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from augserve.engine.tool_prompt import call_markup, tools_block
from augserve.workload.tokenize import approx_token_count

DATA = "bfcl_eval/data"
VERSION = "2026.3.23"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def func_docs(root: Path, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The function docs an entry offers: its classes' functions less the excluded."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    excluded = set(entry.get("excluded_function", []))
    docs: list[dict[str, Any]] = []
    for cls in entry["involved_classes"]:
        path = root / DATA / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]
        docs += [d for d in _lines(path) if d["name"] not in excluded]
    return docs


def parse_call(text: str, docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`mv(source='a', destination='b')` as an OpenAI tool call (positional arguments
    named in the order of the function's documented properties)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call: {text!r}")
    name = node.func.id
    props = list(docs.get(name, {}).get("parameters", {}).get("properties", {}))
    args = {props[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    return {"function": {"name": name, "arguments": args}}


def derive_entry(root: Path, entry: dict[str, Any], answer: list[list[str]]) -> dict[str, Any]:
    """One conversation's token counts, its calls executed turn by turn."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    docs = func_docs(root, entry)
    by_name = {d["name"]: d for d in docs}
    tools = [{"type": "function", "function": d} for d in docs]
    turns = []
    for messages, calls in zip(entry["question"], answer, strict=True):
        user = " ".join(m["content"] for m in messages if m["role"] == "user")
        results, _ = execute_multi_turn_func_call(
            calls, entry["initial_config"], entry["involved_classes"], "derive", entry["id"]
        )
        steps = [
            {
                "call_tokens": approx_token_count(call_markup([parse_call(c, by_name)], "hermes")),
                "result_tokens": approx_token_count(f"<tool_response>\n{r}\n</tool_response>"),
            }
            for c, r in zip(calls, results, strict=True)
        ]
        turns.append({"user_tokens": approx_token_count(user), "steps": steps})
    system = approx_token_count(tools_block(tools, "hermes"))
    return {"id": entry["id"], "classes": entry["involved_classes"],
            "excluded": sorted(entry.get("excluded_function", [])),
            "system_tokens": system, "turns": turns}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bfcl", type=Path, required=True, help="the unpacked bfcl-eval wheel")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(args.bfcl))
    entries = _lines(args.bfcl / DATA / "BFCL_v4_multi_turn_base.json")
    answer_file = args.bfcl / DATA / "possible_answer" / "BFCL_v4_multi_turn_base.json"
    answers = {a["id"]: a["ground_truth"] for a in _lines(answer_file)}
    derived = [derive_entry(args.bfcl, e, answers[e["id"]]) for e in entries]
    out = {
        "source": f"bfcl-eval {VERSION}, {DATA}/BFCL_v4_multi_turn_base.json and its possible "
        "answers (Apache-2.0); token counts only",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "token_rule": "augserve.workload.tokenize.approx_token_count",
        "entries": derived,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    steps = sum(len(t["steps"]) for e in derived for t in e["turns"])
    print(f"{len(derived)} conversations, {steps} calls -> {args.out}")


if __name__ == "__main__":
    main()
