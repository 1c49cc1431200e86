"""What both PureJaxRL runners do before importing PureJaxRL's files (it is not a package): check
that each file is the one of the pinned commit (its git blob hash), put empty stand-ins for brax
and navix in ``sys.modules`` (``wrappers.py`` imports them at the top, for environments we do not
use) and put the source folder on ``sys.path``. Imported by the runners, which sit beside it."""

import hashlib
import sys
import types
from pathlib import Path

COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"


def prepare(src: Path, blobs: dict[str, str]) -> None:
    """Exit with one line if a file of ``blobs`` ({name: git blob hash}) is missing from ``src``
    or is not that commit's; then make ``src``'s modules importable."""
    for name, blob in blobs.items():
        path = src / name
        if not path.exists():
            sys.exit(f"PureJaxRL source missing: {path} (export purejaxrl/{name} of {COMMIT}; "
                     f"see the runner's docstring)")
        data = path.read_bytes()
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != blob:
            sys.exit(f"{path} is not purejaxrl/{name} of commit {COMMIT}")
    for stub in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training",
                 "navix"):
        sys.modules.setdefault(stub, types.ModuleType(stub))
    sys.modules["brax"].envs = sys.modules["brax.envs"]
    sys.modules["brax.envs.wrappers.training"].EpisodeWrapper = None
    sys.modules["brax.envs.wrappers.training"].AutoResetWrapper = None
    sys.path.insert(0, str(src))
