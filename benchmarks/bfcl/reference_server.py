"""A transformers reference for BFCL's prompt path: `POST /v1/completions` with greedy
decoding on the same GGUF file augserve serves (transformers dequantizes it at load).

    python benchmarks/bfcl/reference_server.py --gguf FILE --port 8401

Only what BFCL's self-hosted handlers send is read: `prompt`, `max_tokens`; decoding
is greedy (BFCL asks for temperature 0.001) and stops at the tokenizer's EOS or
`<|im_end|>`. One request at a time (BFCL's generate runs one thread by default).
Runs in the BFCL venv (torch, transformers, gguf), not in augserve's.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STOPS = ("<|im_end|>", "<|endoftext|>")


class Reference:
    def __init__(self, gguf: Path, max_new: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        kw = {"gguf_file": gguf.name}
        self.tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        self.model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, torch_dtype=torch.float32, **kw
        )
        self.model.eval()
        self.max_new = max_new
        self.stop_ids = [i for s in STOPS if (i := self.tok.convert_tokens_to_ids(s)) is not None]
        self.lock = threading.Lock()

    def complete(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        ids = self.tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        with self.lock, self.torch.no_grad():
            out = self.model.generate(
                ids,
                max_new_tokens=min(max_tokens, self.max_new),
                do_sample=False,
                eos_token_id=self.stop_ids,
                pad_token_id=self.stop_ids[0],
            )
        new = out[0, ids.shape[1] :].tolist()
        stopped = bool(new) and new[-1] in self.stop_ids
        text = self.tok.decode(new[:-1] if stopped else new, skip_special_tokens=False)
        return {
            "id": "cmpl-reference",
            "object": "text_completion",
            "model": "reference",
            "choices": [
                {"index": 0, "text": text, "finish_reason": "stop" if stopped else "length"}
            ],
            "usage": {
                "prompt_tokens": ids.shape[1],
                "completion_tokens": len(new),
                "total_tokens": ids.shape[1] + len(new),
            },
        }


def handler(ref: Reference) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._send(200, {"object": "list", "data": [{"id": "reference"}]})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            if not self.path.endswith("/completions") or not isinstance(body.get("prompt"), str):
                self._send(400, {"error": {"message": "POST /v1/completions with a prompt"}})
                return
            self._send(200, ref.complete(body["prompt"], int(body.get("max_tokens") or 256)))

        def _send(self, status: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--port", type=int, default=8401)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args()
    ref = Reference(args.gguf, args.max_new_tokens)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(ref))
    print(f"reference ready on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
