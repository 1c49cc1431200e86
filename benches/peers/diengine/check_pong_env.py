import sys, time, runpy
sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
import ale_gym_register
import numpy as np
from easydict import EasyDict
from ding.config import compile_config
from ding.envs import get_vec_env_setting
cfgmod = runpy.run_path(sys.argv[1])
main_config, create_config = cfgmod['main_config'], cfgmod['create_config']
cfg = compile_config(main_config, seed=0, env=None, auto=True, create_cfg=create_config, save_cfg=False)
env_fn, collector_env_cfg, evaluator_env_cfg = get_vec_env_setting(cfg.env)
env = env_fn(collector_env_cfg[0])
env.seed(0)
t = time.time(); obs = env.reset()
print('obs', obs.shape, obs.dtype, 'actions', env.action_space)
ret, n = 0.0, 0
for i in range(200):
    ts = env.step(env.random_action())
    ret += float(np.asarray(ts.reward).sum()); n += 1
    if ts.done: break
print('steps', n, 'return', ret, 'done', ts.done, 'obs', ts.obs.shape, 'sec', round(time.time()-t, 2), 'info', ts.info)
env.close()
