"""``python -m harness.cachepack export PATH [--kind KIND] [--key KEY] | import PATH | list`` (``--root DIR``)."""

import sys

from .cli import main

sys.exit(main())
