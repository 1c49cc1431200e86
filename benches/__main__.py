"""``python -m benches``: the command line of cli.py."""

import sys

from benches.cli import main

sys.exit(main())
