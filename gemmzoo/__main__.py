"""``python -m gemmzoo``: the command line."""

import sys

from gemmzoo.cli import main

sys.exit(main())
