"""Does the fitted profile price the agent-session batches? (diagnosis, not a comparison)

The sessions-q1 simulator replica (`benchmarks/sim_sessions.py`) prices every iteration
with the profile the q1 run fitted on the engine (`docs/data/sessions-q1-diag/`), whose
grid stops at 1,024 tokens of context and takes the fastest of 3 runs. Session turns
attend to 500-1,900 tokens. This times such batches on the engine the server runs
(runs/calib/llama-small, fp32, one torch thread, 128 blocks of 32) and prints measured /
predicted for each, the median of `--repeats` runs after a warm-up.

With `--fit` the profile is the one the server would fit at start-up on this engine now
(`startup_profile.fit_startup_profile`, the current grid; max batch tokens 2,048 as
the sessions runs), not a file: does the start-up fit price what the server will run?

    python benchmarks/vs_vllm/check_profile_sessions.py [--repeats 5] [--fit] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyProfile
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner
from augserve.engine.profiler import BatchSpec, shape_of, time_batch
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.startup_profile import fit_startup_profile
from augserve.engine.warmup import warm_up
from augserve.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "docs/data/sessions-q1-diag/profile-augserve.json"
SPECS: list[BatchSpec] = [
    ([(256, 0)], []),  # inside the fitted grid
    ([], [512] * 8),
    ([(128, 1024)], []),  # a session turn's new tokens on a long context
    ([(512, 1024)], []),
    ([(256, 1536)], []),
    ([(2048, 0)], []),  # a recompute chunk
    ([(1024, 896)], []),
    ([], [1500] * 8),  # decodes on long contexts
    ([], [1200] * 16),
    ([(256, 1200)], [1500] * 6),  # a mix
    ([(64, 1000)] * 4, []),  # several turns' new tokens in one step
    ([(32, 800)] * 8, []),
    ([(128, 1500)] * 3, [1200] * 8),
    ([(16, 600)] * 4, [300, 900, 1500, 1800] * 4),  # a loaded session step
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "runs/calib/llama-small"))
    ap.add_argument("--profile", default=str(PROFILE))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fit", action="store_true", help="fit the start-up profile here")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    kv = KVCacheConfig(32, 128, None, 0)
    runner = ModelRunner(RunnerConfig(resolve_model(args.model), "float32", "cpu", kv, 1))
    warm_up(runner)
    if args.fit:
        config = SchedulerConfig(max_batch_tokens=2048)
        prof: LatencyProfile = fit_startup_profile(runner, config, "startup")
    else:
        prof = load_profile(args.profile)
    rows = []
    for prefills, decodes in SPECS:
        spec = (prefills, decodes)
        measured = time_batch(runner, spec, args.repeats, "median")
        fastest = time_batch(runner, spec, args.repeats, "min")
        predicted = prof.iteration_time(shape_of(prefills, decodes))
        rows.append({"prefills": prefills, "decodes": decodes, "median_s": measured,
                     "min_s": fastest, "predicted_s": predicted})  # fmt: skip
        print(f"prefill {prefills} decode {len(decodes)}x{decodes[:1]}: median "
              f"{measured * 1e3:.1f} ms, min {fastest * 1e3:.1f}, profile "
              f"{predicted * 1e3:.1f} ({measured / predicted:.2f}x)", flush=True)  # fmt: skip
    if args.out:
        meta = {"load": os.getloadavg(), "profile": "start-up fit" if args.fit else args.profile}
        Path(args.out).write_text(json.dumps({**meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
