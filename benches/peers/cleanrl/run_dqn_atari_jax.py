"""Run CleanRL's ``dqn_atari_jax.py`` unmodified on Gymnasium 1.x and ale-py 0.12.

CleanRL pins gymnasium 0.29 and ale-py 0.8 (Python < 3.11); the GPU machines have Python 3.12 and
jax 0.11. Three names moved in Gymnasium 1.0 and are aliased here before the script runs:
``GrayScaleObservation`` -> ``GrayscaleObservation``, ``FrameStack`` -> ``FrameStackObservation``,
and ale-py's ids are registered explicitly. The script's loop is untouched (1 env, a gradient step
every 4 env steps, batch 32); it prints ``SPS: N`` every 100 steps once learning has started.

    python benches/peers/cleanrl/run_dqn_atari_jax.py CLEANRL_DIR --env-id PongNoFrameskip-v4 ...

CLEANRL_DIR holds ``dqn_atari_jax.py`` and ``cleanrl_utils/`` from vwxyzjn/cleanrl (read at
fe8d8a03); the rest of the arguments go to the script (tyro).
"""

import os
import runpy
import sys

import ale_py
import gymnasium as gym

gym.register_envs(ale_py)
gym.wrappers.GrayScaleObservation = gym.wrappers.GrayscaleObservation
gym.wrappers.FrameStack = lambda env, n: gym.wrappers.FrameStackObservation(env, n)

if __name__ == "__main__":
    root = os.path.abspath(sys.argv[1])
    sys.path.insert(0, root)
    script = os.path.join(root, "dqn_atari_jax.py")
    sys.argv = [script] + sys.argv[2:]
    runpy.run_path(script, run_name="__main__")
