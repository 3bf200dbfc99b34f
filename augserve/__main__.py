"""`python -m augserve ...` is `augserve ...`."""

import sys

from augserve.cli import main

sys.exit(main())
