"""Ctrl-C landing inside `prepare_plotting`'s import of matplotlib must not break the
plot written right after it (the bug: a half-imported matplotlib stayed in sys.modules
and the plot failed with AttributeError, exit 1 instead of 130)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys
    from augserve.bench.plots import plot_sweep, prepare_plotting

    class Interrupt:  # a Ctrl-C in the middle of matplotlib's import
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib.pyplot":
                raise KeyboardInterrupt
            return None

    sys.meta_path.insert(0, Interrupt())
    try:
        prepare_plotting()
        raise SystemExit("no interrupt")
    except KeyboardInterrupt:
        pass
    sys.meta_path.pop(0)
    assert "matplotlib" not in sys.modules
    rows = [{"policy": "p", "rate": 1.0, "goodput": 1.0, "ttft_mean": 0.1,
             "norm_latency_mean": 0.01}]
    print(plot_sweep(rows, sys.argv[1]))
    """
)


def test_a_plot_after_an_interrupted_import_is_written(tmp_path: Path) -> None:
    out = tmp_path / "b.png"
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"


HOLD = textwrap.dedent(
    """
    import os, signal
    from augserve.bench.pool import hold_interrupt, interrupt_guard

    events = []
    with interrupt_guard():
        try:
            with hold_interrupt():
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands in the held block
                for _ in range(1000):
                    pass  # the handler has run by now; nothing was raised here
                events.append("block finished")
        except KeyboardInterrupt:
            events.append("raised after the block")
    print(",".join(events))
    """
)


def test_a_ctrl_c_inside_a_held_block_is_raised_when_it_ends() -> None:
    """The fix for the flake above at its root: `augserve bench` imports matplotlib
    under `hold_interrupt`, so a first Ctrl-C cannot cut the import in half."""
    res = subprocess.run([sys.executable, "-c", HOLD], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "block finished,raised after the block"
