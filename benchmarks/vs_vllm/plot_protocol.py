"""The figure of a protocol result file (attainment and goodput vs rate, intervals).

    python benchmarks/vs_vllm/plot_protocol.py docs/data/vs-vllm-tools-protocol-r3.json \\
        --out docs/img/vs-vllm-tools-protocol-r3.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from augserve.bench.protocol_plot import plot_protocol


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("result", type=Path, help="a result file of the protocol (JSON)")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = ap.parse_args()
    result = json.loads(args.result.read_text())
    title = (
        f"{result.get('config', args.result.name)}: time scale {result['time_scale']:g}, "
        f"{result['repeats']} repeats, KV tokens {result['memory']['baseline_tokens']} each"
    )
    print(plot_protocol(result, args.out, title))


if __name__ == "__main__":
    main()
