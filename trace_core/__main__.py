"""``python -m trace_core``: the command line (see trace_core.cli)."""

import sys

from .cli import main

sys.exit(main())
