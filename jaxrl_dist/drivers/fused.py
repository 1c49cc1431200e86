"""The fused driver: the whole update, rollout and ``learn``, is ONE compiled program of
``n`` updates (``Learner.update``); environments written in JAX step inside it, pools
(``envs.pool``) through XLA calls from it. Evaluation is a compiled program too."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import jax

from jaxrl_dist import compile_cache
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.drivers.base import Driver, Ready, Seconds, init_or_restore, lower_exploit


class FusedDriver(Driver):

    def compile_and_init(self, *, learner: Any, sizes: sizes_lib.Sizes, seed_keys: Any,
                         swept: Any, restore: Callable[[Any], tuple[Any, int]] | None,
                         eval_episodes: int, eval_deterministic: bool) -> Ready:
        """Trace the programs and compile each on a worker thread (XLA releases the GIL) as
        soon as it is traced, in the order that keeps the update's compile alone on the
        machine: init first (its compile runs while this thread traces the update), then the
        update, then the evaluation, whose compile waits for the update's and is not waited
        for: training starts once the update is compiled, and the first evaluation waits for
        its program (:class:`Deferred`), compiled at the lowest CPU priority in a one-process
        run (:func:`compile_cache.compile_in_background`). Three compiles at once on 2 cores
        slowed the update's by more than they overlapped: MPE IPPO x 8 seeds, compile time
        7.0 -> 5.7 s (medians of 5 alternated pairs, faster in each, the same bits; Zen 5 EPYC,
        2026-11-30). Init and the evaluation, which run once or rarely, compile at a cheaper
        level."""
        del eval_episodes, eval_deterministic   # compiled into learner.evaluate
        fast = learner.speed_options   # the update's (on GPUs: loops in CUDA graphs)
        # init and the evaluation: cheaper on CPUs; on GPUs the evaluation's episode loop is
        # launch-bound like the update's
        once = compile_cache.run_once_options(learner.layout.mesh.devices.flat) or fast
        abstract = learner.abstract_state()
        call_sizes = set(sizes_lib.calls(sizes))   # a resume off this grid compiles more below
        seconds = Seconds()
        env_inputs = learner.env_inputs
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="compile")
        try:   # a worker compiles each program once this thread has traced it (its Python
            # holds the GIL, XLA's compile not)
            init_kind, compile_init = seconds.timed("init", learner.init.lower, seed_keys, swept)
            init_compile = pool.submit(seconds.timed, "init", compile_init)
            pending = {}
            for n in sorted(call_sizes):
                low = seconds.timed("update", learner.update.lower, abstract, n)
                pending[n] = pool.submit(seconds.timed, "update", low.compile, fast)
            lowered_eval = seconds.timed("evaluate", learner.evaluate.lower, abstract.train,
                                         seed_keys, env_inputs.eval)

            def compile_eval():   # after the update's: beside it, it slowed the update's
                for compiling in pending.values():
                    compiling.result()
                compile_cache.compile_in_background()   # beside training, not ahead of it
                return seconds.timed("evaluate", lowered_eval.compile, once)
            evaluate = Deferred(pool.submit(compile_eval))
            lowered_exploit = seconds.timed("pbt", lower_exploit, learner, abstract)
            pending_exploit = None if lowered_exploit is None else pool.submit(
                seconds.timed, "pbt", lowered_exploit.compile)
            learner.init.adopt(init_kind, init_compile.result())
            state, updates_done = init_or_restore(learner, seed_keys, swept, restore)
            compiled = {n: f.result() for n, f in pending.items()}
            exploit = None if pending_exploit is None else pending_exploit.result()
        except BaseException:   # do not wait for the compiles: fail at once
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=False)   # the evaluation's compile goes on
        for n in set(sizes_lib.calls(sizes, updates_done)) - set(compiled):   # resumed off
            compiled[n] = learner.update.lower(abstract, n).compile(fast)      # this grid
        jax.block_until_ready(state)
        return Ready(state, updates_done, compiled, evaluate, seconds, exploit)


class Deferred:
    """A program still compiling on a worker thread: a call waits for it (and raises what the
    compile raised); :meth:`check` raises a failed compile without waiting, so a run does not
    train to its first evaluation to learn that it cannot evaluate."""

    def __init__(self, compiling: Future):
        self._compiling = compiling

    def __call__(self, *args: Any) -> Any:
        return self._compiling.result()(*args)

    def check(self) -> None:
        if self._compiling.done() and self._compiling.exception() is not None:
            raise self._compiling.exception()
