"""``python -m harness.compare BASE_RUN NEW_RUN [--fail-on SPEC] [--alpha A] [--min-samples N] [--markdown FILE] [--html FILE]``."""

import sys

from .cli import main

sys.exit(main())
