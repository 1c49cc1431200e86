"""``python -m jaxrl_dist.bench``: the command line of cli.py."""

import sys

from jaxrl_dist.bench.cli import main

sys.exit(main())
