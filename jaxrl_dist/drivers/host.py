"""The host driver: this process's environments step on its CPUs (``actors.HostActors``),
acting with the learner's ``act`` on a local device; each update's batch becomes global arrays
for ``Learner.learn_next``, the learner's own ``learn`` over the mesh. Synchronous (act, then
learn) or overlapped (act on the next batch on a device of its own while the mesh learns)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax

from jaxrl_dist import actors as actors_lib
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.drivers.base import Driver, Ready, Seconds, init_or_restore, lower_exploit
from jaxrl_dist.envs import EnvSpec


class HostDriver(Driver):

    steps_on_cpus = True

    def __init__(self, spec: EnvSpec, overlap: bool, devices: Sequence[Any] | None):
        devices, self.actor_device = actors_lib.learner_devices(overlap, devices)
        super().__init__(spec, devices)
        self.actors: actors_lib.HostActors | None = None

    def compile_and_init(self, *, learner: Any, sizes: sizes_lib.Sizes, seed_keys: Any,
                         swept: Any, restore: Callable[[Any], tuple[Any, int]] | None,
                         eval_episodes: int, eval_deterministic: bool) -> Ready:
        """Init (or restore) the state, open this process's environments (seeded from the
        update it starts at) and compile ``learn_next``, which every call of the host actors
        runs once per update (or, where it applies, ``learn_next`` and the next step's acting
        as one program: ``HostActors.fusable``), and with PBT its round."""
        seconds = Seconds()
        state, updates_done = init_or_restore(learner, seed_keys, swept, restore)
        host = self.actors = actors_lib.HostActors(
            learner, self.spec, sizes, eval_episodes, eval_deterministic, seed_keys,
            updates_done, self.actor_device)
        try:
            abstract = learner.abstract_state()
            fast = learner.speed_options   # on GPUs: loops in CUDA graphs
            if host.fusable():   # one dispatch an env step: unpack, learn, then act
                host.learn_act = seconds.timed("update", lambda: host.fuse_learn_act().lower(
                    abstract.train, abstract.data, host.abstract_packed()).compile(fast))
            else:
                host.unpack = host.unpack.lower(host.abstract_packed()).compile()
                host.learn = seconds.timed("update", lambda: learner.learn_next.lower(
                    abstract.train, abstract.data, host.abstract_trajectory()).compile(fast))
            lowered = lower_exploit(learner, abstract)   # PBT: its round, between calls
            exploit = None if lowered is None else seconds.timed("pbt", lowered.compile)
        except BaseException:   # the run never starts: its environments' workers end now
            self.close()
            raise
        compiled = {n: host.updates(n) for n in set(sizes_lib.calls(sizes, updates_done))}
        jax.block_until_ready(state)
        return Ready(state, updates_done, compiled, host.evaluate, dict(seconds), exploit)

    def describe(self) -> str:
        if self.actors is not None and self.actors.overlap:
            return f", acting on {self.actors.device} during updates (overlap_actors)"
        return ""

    def row_end(self, stamp: Callable[[], Any]) -> Any:
        # a call returns once its environments have stepped (its last learn in flight): its
        # row's interval ends here, not when the row is logged after the NEXT call
        return stamp()

    def close(self) -> None:
        if self.actors is not None:
            self.actors.close()
