"""BFCL (bfcl-eval 2026.3.23) through augserve's chat path, its /v1/completions prompt
path, and a transformers reference on the same model file.

    /work/venvs/bfcl/bin/python benchmarks/bfcl/run_bfcl.py --limit 5 \
        --out docs/data/bfcl/smollm2.json

Runs in a venv holding bfcl-eval (never augserve's own). A registration wrapper
around BFCL's CLI, no copy of its code: three models are added to BFCL's
`MODEL_CONFIG_MAPPING` and BFCL's own `generate` and `evaluate` run them:

- `augserve-chat`: BFCL's `OpenAICompletionsHandler` (function-calling mode) against
  `augserve serve` (OPENAI_BASE_URL): augserve's chat template, tools prompt and parser;
- `augserve-completions`: BFCL's `QwenFCHandler` (its own ChatML + `<tool_call>`
  prompt, BFCL's parser) against augserve's `/v1/completions` (--skip-server-setup);
- `reference`: the same handler against `reference_server.py` (transformers, greedy).

BFCL loads `$BFCL_PROJECT_ROOT/.env` with override=True at every command, so a
variable set in the shell loses to a stale `.env`: this script writes a minimal one
before each run. `--limit N` runs the first N entries of each category (BFCL's
`--run-ids` file). Generation is capped at `--max-tokens` per turn on every path.
multi_turn_base runs through BFCL's own multi-turn loops with BFCL's own step cap
(MAXIMUM_STEP_LIMIT steps per user turn); no other cap is added. The JSON records the
load average once a minute during the generation (`generation`), BFCL's reason for each
failed entry and, for multi-turn entries, the steps and prompt tokens of each turn.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CATEGORIES = {  # the issue's names -> BFCL v4's
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "multi_turn_base": "multi_turn_base",
}
SERVED = "smollm2"
DEFAULT_GGUF = Path.home() / ".cache/augserve/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def register(max_tokens: int) -> None:
    """The three models, as BFCL's registry entries (handlers subclassed only to cap
    the tokens generated per turn)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
    from bfcl_eval.model_handler.api_inference.openai_completion import (
        OpenAICompletionsHandler,
    )
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    class CappedChat(OpenAICompletionsHandler):  # type: ignore[misc]
        def generate_with_backoff(self, **kwargs: Any) -> Any:
            return super().generate_with_backoff(max_tokens=max_tokens, **kwargs)

    class CappedPrompt(QwenFCHandler):  # type: ignore[misc]
        @property
        def client(self) -> Any:
            return self._capped

        @client.setter
        def client(self, value: Any) -> None:  # BFCL's spin-up sets an OpenAI client
            create = value.completions.create

            def capped(**kw: Any) -> Any:
                kw["max_tokens"] = min(int(kw.get("max_tokens") or max_tokens), max_tokens)
                return create(**kw)

            value.completions.create = capped
            self._capped = value

    common = {"url": "https://github.com/", "org": "augserve", "license": "apache-2.0"}
    MODEL_CONFIG_MAPPING["augserve-chat"] = ModelConfig(
        model_name=SERVED,
        display_name="augserve chat",
        model_handler=CappedChat,
        is_fc_model=True,
        underscore_to_dot=True,
        **common,
    )
    for name in ("augserve-completions", "reference"):
        MODEL_CONFIG_MAPPING[name] = ModelConfig(
            model_name=SERVED,
            display_name=name,
            model_handler=CappedPrompt,
            is_fc_model=False,
            underscore_to_dot=False,
            **common,
        )


def write_env(root: Path, port: int) -> None:
    """BFCL's .env (loaded with override=True): only what the run needs."""
    lines = [
        "OPENAI_API_KEY=sk-augserve-bfcl",
        f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1",
        "LOCAL_SERVER_ENDPOINT=127.0.0.1",
        f"LOCAL_SERVER_PORT={port}",
    ]
    (root / ".env").write_text("\n".join(lines) + "\n")


def write_ids(root: Path, categories: list[str], limit: int | None) -> dict[str, int]:
    """BFCL's test_case_ids_to_generate.json: the first `limit` ids of each category."""
    from bfcl_eval.utils import load_dataset_entry

    ids = {}
    for cat in categories:
        entries = load_dataset_entry(CATEGORIES[cat])
        ids[CATEGORIES[cat]] = [e["id"] for e in entries[:limit]]
    (root / "test_case_ids_to_generate.json").write_text(json.dumps(ids, indent=1))
    return {cat: len(ids[CATEGORIES[cat]]) for cat in categories}


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def start(cmd: list[str], url: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = log.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(url, proc)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    return proc


def bfcl(root: Path, *argv: str) -> None:
    """BFCL's own CLI, in this process (so the registrations hold)."""
    from bfcl_eval.__main__ import cli

    try:
        cli([*argv], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise


def run_model(root: Path, model: str, port: int, local_dir: Path) -> None:
    write_env(root, port)
    argv = ["generate", "--model", model, "--run-ids", "--allow-overwrite"]
    if model != "augserve-chat":
        argv += ["--skip-server-setup", "--local-model-path", str(local_dir)]
    bfcl(root, *argv)


def accuracies(root: Path, model: str, categories: list[str]) -> dict[str, tuple[float, int]]:
    """Per category: BFCL's accuracy (percent) and the number of entries it scored."""
    out = {}
    for cat in categories:
        files = list((root / "score" / model).rglob(f"BFCL_v4_{CATEGORIES[cat]}_score.json"))
        if not files:
            continue
        head = json.loads(files[0].read_text().splitlines()[0])
        out[cat] = (round(100.0 * float(head["accuracy"]), 2), int(head["total_count"]))
    return out


def verdicts(root: Path, model: str, categories: list[str]) -> dict[str, dict[str, bool]]:
    """Per category and entry id: whether BFCL scored the entry correct.

    The entries run are the ids in the result file; the score file lists the failed ones
    after its summary line."""
    out: dict[str, dict[str, bool]] = {}
    for cat in categories:
        name = CATEGORIES[cat]
        results = list((root / "result" / model).rglob(f"BFCL_v4_{name}_result.json"))
        scores = list((root / "score" / model).rglob(f"BFCL_v4_{name}_score.json"))
        if not results or not scores:
            continue
        ran = [json.loads(x)["id"] for x in results[0].read_text().splitlines() if x.strip()]
        lines = scores[0].read_text().splitlines()[1:]
        failed = {json.loads(x)["id"] for x in lines if x.strip()}
        out[cat] = {i: i not in failed for i in ran}
    return out


def failure_reasons(root: Path, model: str, categories: list[str]) -> dict[str, str]:
    """Per failed entry: BFCL's reason (the score file's `error_type`, else its first
    `error` message), so that equal verdicts can be read as failures for the same cause."""
    out: dict[str, str] = {}
    for cat in categories:
        name = CATEGORIES[cat]
        for f in (root / "score" / model).rglob(f"BFCL_v4_{name}_score.json"):
            for line in f.read_text().splitlines()[1:]:
                if not line.strip():
                    continue
                entry = json.loads(line)
                err = entry.get("error", "")
                if isinstance(err, dict):
                    err = err.get("error_type") or err.get("error_message", "")
                elif isinstance(err, list):
                    err = err[0] if err else ""
                out[entry["id"]] = str(err)
    return out


def multi_turn_shape(root: Path, model: str) -> dict[str, dict[str, list[int]]]:
    """Per multi-turn entry: the model steps of each user turn (a step is one request;
    BFCL goes on to the next turn when a reply holds no call it can execute, and stops
    a turn after its MAXIMUM_STEP_LIMIT steps) and each step's prompt tokens."""
    out: dict[str, dict[str, list[int]]] = {}
    for f in (root / "result" / model).rglob("BFCL_v4_multi_turn_*_result.json"):
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            counts = entry.get("input_token_count") or []
            out[entry["id"]] = {
                "steps_per_turn": [len(t) for t in entry["result"]],
                "prompt_tokens": [int(x) for t in counts for x in t],
            }
    return out


def disagreements(per_path: dict[str, dict[str, dict[str, bool]]]) -> dict[str, list[str]]:
    """Per category: the entries that every path ran but not every path scored the same."""
    out: dict[str, list[str]] = {}
    cats = {c for v in per_path.values() for c in v}
    for cat in sorted(cats):
        tables = [v.get(cat, {}) for v in per_path.values()]
        common = set.intersection(*(set(t) for t in tables)) if tables else set()
        out[cat] = sorted(i for i in common if len({t[i] for t in tables}) > 1)
    return out


def texts(root: Path, model: str) -> dict[str, str]:
    """Every entry's raw model output (BFCL's `result` field), by entry id."""
    out: dict[str, str] = {}
    for f in (root / "result" / model).rglob("*_result.json"):
        for line in f.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                out[entry["id"]] = str(entry["result"])
    return out


def text_agreement(root: Path, a: str, b: str) -> dict[str, int | None]:
    """Per entry both paths ran: None where the outputs are identical, else the first
    character at which they part."""
    ta, tb = texts(root, a), texts(root, b)
    out: dict[str, int | None] = {}
    for i in sorted(set(ta) & set(tb)):
        x, y = ta[i], tb[i]
        n = min(len(x), len(y))
        out[i] = None if x == y else next((k for k in range(n) if x[k] != y[k]), n)
    return out


def provenance(cmd: list[str]) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = " ".join(x for x in line.split(":")[1].split() if x.startswith("avx"))
                break
    return {
        "command": " ".join(cmd),
        "commit": commit,
        "modified_files": [x[3:] for x in dirty if x.strip()],  # uncommitted, at the run
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        "niceness": os.nice(0),
        "cpu_flags": flags,
        "bfcl_eval": "2026.3.23",
    }


def generate(
    args: argparse.Namespace,
    root: Path,
    paths: list[str],
    serve: list[str],
    ref: list[str],
    env: dict[str, str],
    local_dir: Path,
) -> None:
    """The servers a run needs, and BFCL's generate for each path."""
    procs = []
    try:
        if {"augserve-chat", "augserve-completions"} & set(paths):
            health = f"http://127.0.0.1:{args.port}/health"
            procs.append(start(serve, health, root / "serve.log", env))
        if "reference" in paths:
            procs.append(start(ref, f"http://127.0.0.1:{args.port + 1}/", root / "ref.log", env))
        for model in paths:
            port = args.port + 1 if model == "reference" else args.port
            run_model(root, model, port, local_dir)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


class LoadSampler:
    """The machine's load average once a minute while the generation runs (the run's
    timings depend on it; the verdicts do not)."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.samples: list[tuple[str, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            self.samples.append((now, round(os.getloadavg()[0], 2)))
            if self.stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadSampler:
        self.start = datetime.datetime.now(datetime.UTC)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.end = datetime.datetime.now(datetime.UTC)

    def summary(self) -> dict[str, Any]:
        loads = [x for _, x in self.samples]
        return {
            "start": self.start.isoformat(timespec="seconds"),
            "end": self.end.isoformat(timespec="seconds"),
            "wall_s": round((self.end - self.start).total_seconds()),
            "load_1min": {
                "min": min(loads),
                "max": max(loads),
                "mean": round(sum(loads) / len(loads), 2),
            },
            "load_1min_samples": self.samples,
        }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--limit", type=int, default=None, help="first N entries per category")
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--port", type=int, default=8400, help="augserve; the reference: +1")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument(
        "--dtype", default="float32", help="augserve's --dtype (the reference runs in fp32)"
    )
    ap.add_argument("--augserve-python", default="/work/main/.venv/bin/python")
    ap.add_argument("--root", type=Path, default=Path("/tmp/augserve-bfcl"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--paths", default="augserve-chat,augserve-completions,reference")
    ap.add_argument("--note", default=None, help="a note kept in the JSON (how it was run)")
    ap.add_argument(
        "--score-only", action="store_true", help="only evaluate the results already in --root"
    )
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    cats = [c for c in args.categories.split(",") if c]
    root = args.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.environ["BFCL_PROJECT_ROOT"] = str(root)  # read when bfcl_eval is imported
    register(args.max_tokens)
    counts = write_ids(root, cats, args.limit)
    local_dir = root / "model"  # config + tokenizer for BFCL's handler (from the GGUF)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prep = [args.augserve_python, "-c", PREP.format(gguf=str(args.gguf), out=str(local_dir))]
    subprocess.run(prep, check=True, env=env)
    serve = [args.augserve_python, "-m", "augserve", "serve", "--model", str(args.gguf)]
    serve += ["--port", str(args.port), "--served-model-name", SERVED, str(local_dir)]
    serve += ["--profile", "default"]  # no latency fit at start-up: accuracy only
    serve += ["--dtype", args.dtype]  # fp32: the reference's arithmetic
    ref = [sys.executable, str(HERE / "reference_server.py"), "--gguf", str(args.gguf)]
    ref += ["--port", str(args.port + 1), "--max-new-tokens", str(args.max_tokens)]
    paths = args.paths.split(",")
    prov = provenance(sys.argv)  # before the run: the commit the servers start from
    generation = None
    if not args.score_only:
        with LoadSampler() as sampler:
            generate(args, root, paths, serve, ref, env, local_dir)
        generation = sampler.summary()
    for model in paths:
        tests = ",".join(CATEGORIES[c] for c in cats)
        bfcl(root, "evaluate", "--model", model, "--test-category", tests, "--partial-eval")
    table = {m: accuracies(root, m, cats) for m in paths}
    keys = {"augserve-chat": "augserve_chat", "augserve-completions": "augserve_completions"}
    data = prov | {"model": args.gguf.name, "max_tokens_per_turn": args.max_tokens}
    end = provenance(sys.argv)
    data["date"] = end["date"]
    if end["commit"] != prov["commit"]:  # commits landed during the run (not in the servers)
        data["commit_at_end"] = end["commit"]
    if args.note:
        data["note"] = args.note
    if generation is not None:
        data["generation"] = generation
    data["categories"] = {}
    for c in cats:
        row: dict[str, Any] = {keys.get(m, m): table[m].get(c, (None, 0))[0] for m in paths}
        row["n"] = counts[c]
        row["n_scored"] = {keys.get(m, m): table[m].get(c, (None, 0))[1] for m in paths}
        data["categories"][c] = row
    per_entry = {keys.get(m, m): verdicts(root, m, cats) for m in paths}
    data["per_entry"] = per_entry
    data["disagreements"] = disagreements(per_entry)
    data["failure_reasons"] = {keys.get(m, m): failure_reasons(root, m, cats) for m in paths}
    if "multi_turn_base" in cats:
        data["multi_turn"] = {keys.get(m, m): multi_turn_shape(root, m) for m in paths}
    if {"augserve-completions", "reference"} <= set(paths):  # the same prompt on both
        parts = text_agreement(root, "augserve-completions", "reference")
        data["completions_vs_reference_text"] = parts
        same = sum(v is None for v in parts.values())
        print(f"completions path vs reference: {same} of {len(parts)} outputs identical")
    print(json.dumps(data["categories"], indent=1))
    print("entries where the paths disagree:", json.dumps(data["disagreements"]))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


PREP = """
from pathlib import Path
import shutil
from augserve.engine.gguf_dir import gguf_model_dir
d = gguf_model_dir("{gguf}")
out = Path("{out}")
out.mkdir(exist_ok=True)
for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    if (d / f).is_file():
        shutil.copy(d / f, out / f)
"""

if __name__ == "__main__":
    sys.exit(main())
