"""``python -m jaxrl_dist.launch``: the exit code is the launcher's (see supervise.main)."""

import sys

from jaxrl_dist.launch.supervise import main

sys.exit(main())
