"""Run a DI-engine config file as __main__ after registering ALE ids in gym (ale_gym_register).

    python run_config.py CONFIG.py                                   # single process
    python -m torch.distributed.launch --nproc_per_node=2 run_config.py CONFIG.py   # DDP
torch.distributed.launch appends --local-rank=N; it is dropped here (ranks come from env vars).
"""
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ale_gym_register  # noqa: E402,F401

args = [a for a in sys.argv[1:] if not a.startswith(("--local-rank", "--local_rank"))]
if not args:
    sys.exit(__doc__)
sys.argv = args
runpy.run_path(args[0], run_name="__main__")
