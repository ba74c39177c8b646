"""``python -m trace_core``: the command line (see trace_core.cli)."""

import sys

from trace_core.cli import main

sys.exit(main())
