"""DI-engine's CartPole DQN DDP config run with another seed (its file hard-codes seed=0) and
optionally another stop (stop_value, max_env_step), everything else as shipped:

    python -m torch.distributed.launch --nproc_per_node=2 cartpole_ddp_seed.py SEED [STOP MAX_ENV_STEP]
"""
import sys

from ding.entry import serial_pipeline
from ding.utils import DDPContext
from dizoo.classic_control.cartpole.config import cartpole_dqn_ddp_config as cfg

args = [a for a in sys.argv[1:] if not a.startswith(("--local-rank", "--local_rank"))]
if len(args) not in (1, 3):
    sys.exit(__doc__)
seed = int(args[0])
max_env_step = int(1e10)
if len(args) > 1:
    cfg.main_config.env.stop_value = float(args[1])
    max_env_step = int(args[2])
cfg.main_config.exp_name = f"cartpole_dqn_seed{seed}"
with DDPContext():
    serial_pipeline((cfg.main_config, cfg.create_config), seed=seed, max_env_step=max_env_step)
