"""``python -m gemmzoo``: the command line."""

import sys

try:
    from gemmzoo.cli import main
except KeyboardInterrupt:  # Ctrl-C while gemmzoo loads: interrupted, as during a command
    sys.exit(130)

sys.exit(main())
