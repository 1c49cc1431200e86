"""DI-engine's Pong DQN DDP config for a throughput measurement: everything as shipped (its
14.3M-parameter network, batch 32 per rank, 10 updates per 96 samples per rank, 4 envs per
rank) but a smaller replay buffer (its 100k float32 transitions need ~22 GB per rank) and no
evaluation (its first one plays 8 whole games before any training). Stops at MAX_ENV_STEP:

    python -m torch.distributed.launch --nproc_per_node=2 pong_ddp_speed.py BUFFER MAX_ENV_STEP
Speeds come from its collector and learner logs (timestamps, env steps, iterations).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ale_gym_register  # noqa: E402,F401

from ding.entry import serial_pipeline  # noqa: E402
from ding.utils import DDPContext  # noqa: E402
from ding.worker import InteractionSerialEvaluator  # noqa: E402
from dizoo.atari.config.serial.pong import pong_dqn_ddp_config as cfg  # noqa: E402

args = [a for a in sys.argv[1:] if not a.startswith(("--local-rank", "--local_rank"))]
if len(args) != 2:
    sys.exit(__doc__)
buffer, max_env_step = int(args[0]), int(args[1])
cfg.main_config.policy.other.replay_buffer.replay_buffer_size = buffer
cfg.main_config.exp_name = "pong_dqn_ddp_speed"
InteractionSerialEvaluator.should_eval = lambda self, train_iter: False
with DDPContext():
    serial_pipeline((cfg.main_config, cfg.create_config), seed=0, max_env_step=max_env_step)
