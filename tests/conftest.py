import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Tests read the data shipped in the package (a clean clone has it), never ../shared.
PACKAGED_DATA = ROOT / "augserve" / "data"
# Only the byte-identity check of the shipped copy looks here, and skips without it.
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent / "sched"))
