"""``python -m harness.report RUN_DIR [--review FILE]``."""

import sys

from .cli import main

sys.exit(main())
