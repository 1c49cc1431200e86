"""The training run: setup (mesh, programs, state) -> loop (calls + periodic hooks) -> summary.

Every process runs this same code in the same order (SPMD). Only printing and file writes sit
behind ``is_main``; every jitted call, checkpoint save and collective is made by all processes,
and every decision that changes what runs next (stop, early stop, which hooks fire) is taken
from values that are identical on all processes. A single run and a population (many members
in one program, ``population`` in the config) share all of it: a single run is a population
without the member dimension.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from jaxrl_dist import compile_cache, distributed, drivers, faults, integrity, keys, population
from jaxrl_dist import reporting
from jaxrl_dist import rundir, tracking
from jaxrl_dist import policy as policy_lib
from jaxrl_dist import summary as summary_lib
from jaxrl_dist import config as config_lib
from jaxrl_dist import programs, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.programs import make_learner
from jaxrl_dist.agents.base import EPISODE_METRICS
from jaxrl_dist.checkpoint import CheckpointError, Checkpointer, check_compatible
from jaxrl_dist.config import Config, ConfigError
from jaxrl_dist.envs import EnvError, EnvSpec
from jaxrl_dist.envs import from_config as make_env_from_config
from jaxrl_dist.errors import RunError
from jaxrl_dist.hooks import Hook, HookTable
from jaxrl_dist.run import Run

param_stats = integrity.param_stats

# Seconds between polls for a failed background checkpoint write (orbax's check waits for its
# metadata writes, so not after every call); the next save or the end would report it anyway.
CHECK_WRITES_S = 5.0


def train(
    config: Config,
    run_dir: str | Path | None = None,
    *,
    resume: bool = False,
    resume_from: int | None = None,
    env: Any = None,
    env_params: Any = None,
    devices: Sequence[jax.Device] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``config.algo`` on every device (of every process); returns the run summary.

    ``env`` may be a user's gymnax-style environment object instead of ``config.env``.
    ``resume`` continues the run in ``run_dir`` from its newest intact checkpoint (damaged
    ones are named and set aside); ``resume_from`` (implies ``resume``) from that step's.
    """
    start = time.perf_counter()
    resume = resume or resume_from is not None
    cache_dir = compile_cache.enable(config.compile_cache)   # before anything compiles
    compile_cache.install_fenced_threefry()                  # before anything is lowered
    distributed.initialize()
    restore_signals = distributed.install_worker_hooks()
    try:
        with matmul_precision(config):   # every program is traced inside
            before = compile_cache.counts()
            run = setup(config=config, run_dir=run_dir, resume=resume,
                        resume_from=resume_from, env=env, env_params=env_params,
                        devices=devices, progress=progress, start=start)
            run.cache = {"dir": str(cache_dir) if cache_dir else None,
                         **{k: v - before[k] for k, v in compile_cache.counts().items()}}
            with tracking.finished_on_error(run.reporter):
                try:
                    loop(run)
                finally:
                    run.driver.close()
        with tracking.finished_on_error(run.reporter):
            summary = summarize(run)
        if run.status == "diverged":
            raise faults.TrainingDiverged(faults.diverged_message(
                run.watch.tripped, run.checkpointer.directory, run.last_checkpoint))
        return summary
    finally:
        restore_signals()


def matmul_precision(config: Config):
    """The context the run's programs are traced in: float32 matmuls and convolutions at
    ``config.matmul_precision`` ("default": JAX's own, TF32 on recent NVIDIA GPUs)."""
    value = config.matmul_precision
    if value == "default":
        return contextlib.nullcontext()
    return jax.default_matmul_precision(value)


# ---------------------------------------------------------------------------------- SETUP

def setup(*, config: Config, run_dir: str | Path | None, resume: bool, env: Any,
          env_params: Any, devices: Sequence[jax.Device] | None, progress: bool,
          start: float, resume_from: int | None = None) -> Run:
    """The run, ready to loop, in named steps: its pieces (bad input fails before anything is
    written or compiled), its run dir (and W&B run), its programs compiled beside the state's
    init or restore, its reporter, and its start (first checkpoint, first lines)."""
    distributed.heartbeat("setup")
    if distributed.is_main_process():
        tracking.check(config.wandb)   # a missing package: one line before anything is built
    parts = _build(config=config, env=env, env_params=env_params, devices=devices)
    opened = _open_run_dir(config=config, run_dir=run_dir, resume=resume,
                           resume_from=resume_from, learner=parts.learner)
    with tracking.finished_on_error(opened.tracker):
        return _ready(config=config, parts=parts, opened=opened, resume=resume,
                      progress=progress, start=start)


def _ready(*, config: Config, parts: _Parts, opened: _RunDir, resume: bool, progress: bool,
           start: float) -> Run:
    """Setup's steps once the run dir is open: programs, state, reporter, the run's start."""
    seed_keys, swept = _seed_keys(config=config, layout=parts.layout, members=parts.members)
    compile_start = time.perf_counter()

    def restore(state):
        return _restore(config=config, learner=parts.learner,
                        checkpointer=opened.checkpointer, state=state)
    try:
        ready = parts.driver.compile_and_init(
            learner=parts.learner, sizes=parts.sizes, seed_keys=seed_keys, swept=swept,
            restore=restore if opened.restore else None, eval_episodes=config.eval_episodes,
            eval_deterministic=config.eval_deterministic)
    except BaseException:   # the run never starts: what the driver opened is closed now
        parts.driver.close()
        raise
    pbt_key = None
    if parts.learner.pbt is not None:   # every driver compiles the round (Ready.exploit)
        pbt_key = parts.layout.put(keys.seed_words(config.seed),
                                   jax.sharding.PartitionSpec())
    reporter = _make_reporter(run_dir=opened.path, sizes=parts.sizes, progress=progress,
                              resume=resume, updates_done=ready.updates_done,
                              tracker=opened.tracker)
    run = Run(config=config, sizes=parts.sizes, layout=parts.layout, learner=parts.learner,
              env_name=parts.spec.name, run_dir=opened.path, compiled=ready.compiled,
              evaluate=ready.evaluate, seed_keys=seed_keys, checkpointer=opened.checkpointer,
              reporter=reporter, state=ready.state, updates_done=ready.updates_done,
              first_update=ready.updates_done,
              compile_time=time.perf_counter() - compile_start, start=start,
              policy_record=policy_lib.record(config.algo,
                                              config_lib.to_dict(config)[config.algo],
                                              parts.spec),
              compile_programs=ready.seconds,   # live: a background compile adds to it
              device_kind=parts.device_kind, driver=parts.driver,
              watch=faults.DivergenceWatch(config.max_nonfinite_skips, parts.layout.members,
                                           programs.SKIPPED, tuple(EPISODE_METRICS),
                                           say=reporter.message),
              exploit=ready.exploit, pbt_key=pbt_key)
    _start(run, restored=opened.restore, note=opened.note, compile_start=compile_start)
    return run


class _Parts(NamedTuple):
    """What the config (or the API's env and devices) makes before the run touches a disk."""

    members: list[population.Member] | None
    layout: sharding.Layout
    sizes: sizes_lib.Sizes
    spec: EnvSpec
    device_kind: str
    learner: programs.Learner
    driver: drivers.Driver     # how updates reach the environments (fused or host)


def _build(*, config: Config, env: Any, env_params: Any,
           devices: Sequence[jax.Device] | None) -> _Parts:
    """Layout, sizes, environment and learner: every check of the input, so bad input fails
    before a run dir exists."""
    spec = make_env_from_config(config, env, env_params)
    driver = drivers.make(config, spec, devices)
    pop = config.population
    members = population.members(config) if pop.enabled else None
    device_kind = integrity.check_device_kinds()
    if device_kind == "cpu" or driver.steps_on_cpus:   # CPUs compute what must agree
        integrity.check_vector_extensions()
    integrity.check_processes_agree(config)
    layout = sharding.make_layout(driver.devices, len(members) if members else None,
                                  pop.member_devices)
    sizes = sizes_lib.derive_sizes(config, layout.data_size)
    learner = make_learner(config, sizes, spec, layout)
    return _Parts(members, layout, sizes, spec, device_kind, learner, driver)


class _RunDir(NamedTuple):
    path: Path
    checkpointer: Checkpointer
    restore: bool        # a complete checkpoint to continue from
    note: str | None     # said when --resume found none: the run starts from update 0
    tracker: tracking.Tracker | None   # process 0's W&B run, if wandb.mode is not disabled


def _open_run_dir(*, config: Config, run_dir: str | Path | None, resume: bool,
                  resume_from: int | None, learner: programs.Learner) -> _RunDir:
    """The run dir (a new run never writes into one that holds a run) and its checkpointer.
    ``resume`` without a complete checkpoint (killed or out of disk before the first one, or
    no dir yet) starts the run, saying so: a requeued job passes --resume every time;
    ``resume_from`` not there is one line listing the steps that are. Every process takes
    process 0's list. Process 0 opens the W&B run before anything is written (a failed login
    leaves nothing to clean up)."""
    if resume and run_dir is None:
        raise RunError("--resume needs the --run-dir of the run to continue")
    path = Path(run_dir) if run_dir is not None else rundir.default_run_dir(config)
    existed = path.is_dir()
    tracker = None
    if distributed.is_main_process():
        rundir.prepare_run_dir(path, resume=resume)
        tracker = tracking.start(config.wandb, config_lib.to_dict(config), path, resume)
    with tracking.finished_on_error(tracker):
        distributed.barrier("run_dir_checked")
        checkpointer = Checkpointer(path / "checkpoints", keep=config.keep_checkpoints,  # orbax
                                    saved=learner.agent.checkpointed,
                                    policy_params=learner.agent.policy_params)
        checkpointer.prepare(learner.abstract_state)   # compiles beside the run's programs
        steps = checkpointer.steps() if resume else []
        if resume_from is not None and resume_from not in steps:
            raise CheckpointError(f"--resume-from {resume_from}: {path / 'checkpoints'} has "
                                  f"no checkpoint {resume_from} (its checkpoints: "
                                  f"{', '.join(map(str, steps)) or 'none'})")
        checkpointer.resume_from = resume_from
        restore = resume and bool(steps)
    note = rundir.nothing_to_resume(path, existed) if resume and not restore else None
    return _RunDir(path, checkpointer, restore, note, tracker)


def _seed_keys(*, config: Config, layout: sharding.Layout,
               members: list[population.Member] | None) -> tuple[Any, Any]:
    """Each member's PRNG key and swept hyperparameters on the mesh; a single run: its
    seed's key and nothing swept."""
    if not members:
        return keys.seed_key(config.seed), {}
    member_keys = np.stack([keys.seed_words(m.seed) for m in members])
    return (layout.put(member_keys, layout.train),
            layout.put(population.hparams(config), layout.train))


def _restore(*, config: Config, learner: programs.Learner, checkpointer: Checkpointer,
             state: Any) -> tuple[Any, int]:
    """The newest intact checkpoint (or the one ``resume_from`` names) in ``state``'s shapes
    and shardings, refused if it was trained with another config (bookkeeping keys aside);
    with its number of updates. Process 0 names each checkpoint skipped or set aside."""
    def say(line: str) -> None:
        if distributed.is_main_process():
            print(line, file=sys.stderr, flush=True)

    def accept(meta: dict) -> None:   # before anything is set aside
        check_compatible(config_lib.with_defaults(meta["config"]), config_lib.to_dict(config))

    state, meta = checkpointer.restore(state, step=checkpointer.resume_from, say=say,
                                       accept=accept)
    return learner.restored(state), int(meta["updates"])


def _make_reporter(*, run_dir: Path, sizes: sizes_lib.Sizes, progress: bool, resume: bool,
                   updates_done: int, tracker: tracking.Tracker | None
                   ) -> reporting.NullReporter:
    """Process 0 writes the run's files, W&B and progress; the others stay silent. Under
    --resume, metrics.jsonl loses the rows logged after the checkpoint (all of an attempt that
    saved none): they are trained again."""
    if not distributed.is_main_process():
        return reporting.NullReporter()
    reporter = reporting.RunReporter(run_dir, sizes.num_updates * sizes.batch_size, progress,
                                     tracker=tracker)
    if resume:
        reporting.truncate_metrics(run_dir / "metrics.jsonl", updates_done)
    return reporter


def _start(run: Run, *, restored: bool, note: str | None, compile_start: float) -> None:
    """Record the start-up times; a new run saves its first checkpoint (a restart always has
    one to resume from); the reporter starts and says what runs."""
    run.timing["start_up"] = compile_start - run.start
    if note:
        run.reporter.message(note)
    begin = time.perf_counter()
    if not restored:
        run.checkpointer.save(run.state, run.meta())
    run.timed("first_save", begin)
    sizes, layout = run.sizes, run.layout
    run.reporter.start(config_lib.to_dict(run.config),
                       env_steps=run.updates_done * sizes.batch_size)
    rebuilt = summary_lib.rebuilt_on_resume(run)
    rebuilt = f" (not in checkpoints, started afresh: {', '.join(rebuilt)})" if rebuilt else ""
    overlap = run.driver.describe()
    if run.learner.replicated:
        overlap += ", every device learning from the whole batch (replicate_learn)"
    run.reporter.message(
        f"jaxrl_dist: {run.env_name} | {layout.describe()} x {sizes.local_envs} envs{overlap}, "
        f"{distributed.process_count()} process(es) | {sizes.num_updates} updates of "
        f"{sizes.batch_size} steps{f', resuming at {run.updates_done}' if restored else ''}"
        f"{rebuilt} | "
        f"compiled in {run.compile_time:.1f}s | run dir {run.run_dir}")


# ---------------------------------------------------------------------------------- LOOP

def loop(run: Run) -> None:
    """Dispatch calls; after each, fire the hooks that are due. The host logs the PREVIOUS
    call's metrics after dispatching the next, so reading metrics back never idles the devices
    (unless a hook needs the state)."""
    sizes = run.sizes
    pending: list = []   # metrics of the last call, not yet logged
    eval_row: dict[int, dict] = {}

    def evaluate(updates: int) -> None:
        eval_row[updates] = _evaluate(run, updates)

    speed = _Speed(run)
    hooks = _hooks(run, evaluate, lambda: flush())
    for hook in hooks.hooks:   # their time is not training time
        hook.action = speed.paused(hook.action)
    writer = reporting.Background()

    def flush() -> None:
        while pending:
            metrics, updates, n, done_at, pbt_round = pending.pop(0)
            _log(run, writer, speed, metrics, updates, n * sizes.batch_size,
                 eval_row.pop(updates, None), done_at, pbt_round)
        distributed.heartbeat()

    loop_start = time.perf_counter()
    try:
        _calls(run, hooks, pending, flush, speed.paused(evaluate), loop_start, speed.stamp)
        flush()
        writer.close()
    except BaseException:
        writer.close(wait=False)
        if distributed.process_count() == 1:   # a Python caller may resume in this process:
            # the save in flight (of a state checked before it) ends first, not alongside
            with contextlib.suppress(Exception):
                run.checkpointer.close()
        raise
    if run.watch.tripped is not None:   # in the last call's metrics
        run.status = "diverged"
    jax.block_until_ready(run.state)
    run.loop_time = time.perf_counter() - loop_start
    begin = time.perf_counter()
    run.hooks = hooks.describe()
    if run.status not in ("preempted", "diverged") and \
            run.checkpointer.latest_step() != run.updates_done:
        run.checkpointer.save(run.state, run.meta())
    integrity.check_replicas(run.state.train.params, run.layout)
    run.last_checkpoint = run.checkpointer.latest_step()
    run.checkpointer.close()
    run.timed("final_save", begin)


def _calls(run: Run, hooks: HookTable, pending: list, flush, evaluate, loop_start: float,
           stamp) -> None:
    """The calls of the loop, with the hooks due after each. A call of host actors returns
    once its environments have stepped (its last ``learn`` still in flight), so its row's
    interval ends there (``Driver.row_end``), not when the row is logged after the NEXT call:
    the last row would otherwise count its 10 calls' steps over 9 calls' time."""
    sizes = run.sizes
    checked = loop_start   # when a failed background save was last polled for
    measured = (loop_start, run.first_update)   # (time, updates) of the last speed measurement
    hooks.begin(run.updates_done)
    distributed.heartbeat()
    for call_index, n in enumerate(sizes_lib.calls(sizes, run.updates_done)):
        before = run.updates_done
        begin = time.perf_counter()
        run.state, metrics = run.compiled[n](run.state)
        run.timed("loop_dispatch", begin)   # asynchronous: near 0 unless the queue is full
        done_at = run.driver.row_end(stamp)
        run.updates_done += n
        pbt_round = _pbt_round(run) if run.exploit is not None else None
        flush()
        pending.append((metrics, run.updates_done, n, done_at, pbt_round))
        if hooks.calibrates_after(call_index):   # seconds -> updates, agreed (hooks.py)
            jax.block_until_ready(run.state)
            now = time.perf_counter()
            per_update = (now - measured[0]) / (run.updates_done - measured[1])
            hooks.calibrate(float(distributed.broadcast(np.float64(per_update))))
            measured = (now, run.updates_done)
        last_call = run.updates_done == sizes.num_updates
        diverged = run.watch.tripped is not None   # no checkpoint once it has
        fired = hooks.run_due(before, run.updates_done,
                              skip=("evaluate", "checkpoint") if last_call or diverged else ())
        if last_call:
            evaluate(run.updates_done)   # a run reports what its FINAL policy does
        if "evaluate" in fired or last_call:
            flush()                      # the eval is logged on its own update's row
        distributed.maybe_inject_fault(run.updates_done)
        if time.perf_counter() - checked > CHECK_WRITES_S:   # a background save or compile
            run.checkpointer.check()                          # that failed ends the run now
            getattr(run.evaluate, "check", lambda: None)()
            checked = time.perf_counter()
        if _should_stop(run, call_index, saved="checkpoint" in fired, flush=flush):
            break


def _pbt_round(run: Run) -> Any:
    """A PBT round if one is due after this call (the same update on every process), on the
    state the checkpoint of this update then holds; its record (arrays still on the devices,
    read when the call's rows are logged), or None."""
    settings = run.learner.pbt
    if run.updates_done not in settings.rounds:
        return None
    begin = time.perf_counter()
    fitness = None
    if settings.fitness == "eval":
        result = run.evaluate(run.state.train, run.seed_keys, run.learner.env_inputs.eval)
        fitness = jax.device_put(result["return_mean"], run.layout.sharding(run.layout.train))
    train, pbt, record = run.exploit(run.state.train, run.state.pbt, run.pbt_key, fitness)
    run.state = run.state._replace(train=train, pbt=pbt)
    run.timed("pbt_dispatch", begin)
    return record


class _Speed:
    """Env steps per second of TRAINING for each metrics row: the steps of the last ``WINDOW``
    rows over the wall time from just before the first of them to when this row's metrics were
    ready, less the time spent in hooks in between. A hook first waits for the calls before it
    (so their device time counts as training) and its own time is then excluded. Without this a
    row that spanned an evaluation or a checkpoint read as a dip and the row after it as a spike
    (a Pong run's rows: median 252 env steps/s, one at 1.27M). A window rather than one row:
    the host sees a call finish only when it next looks, so a single row's interval jitters
    (several calls can finish between two looks while the host writes)."""

    WINDOW = 10

    def __init__(self, run: Run):
        self.run = run
        self.hooks_s = 0.0   # seconds in hooks so far
        self.marks: collections.deque = collections.deque([(time.perf_counter(), 0.0, 0)],
                                                          maxlen=self.WINDOW + 1)

    def paused(self, action):
        def run_hook(updates: int) -> None:
            jax.block_until_ready(self.run.state)
            begin = time.perf_counter()
            try:
                action(updates)
            finally:
                self.hooks_s += time.perf_counter() - begin
        return run_hook

    def stamp(self) -> tuple[float, float]:
        """(now, seconds in hooks so far): where a row's interval ends."""
        return time.perf_counter(), self.hooks_s

    def rate(self, steps: int, at: tuple[float, float] | None = None) -> float:
        """Called when a row's metrics are ready, with the row's env steps (and, for a call
        that was synchronous, its :meth:`stamp` from when it returned)."""
        self.marks.append((*(at or self.stamp()), steps))
        (t0, h0, _), (t1, h1, _) = self.marks[0], self.marks[-1]
        done = sum(n for _, _, n in list(self.marks)[1:])
        return done / max((t1 - t0) - (h1 - h0), 1e-9)


def _hooks(run: Run, evaluate, flush) -> HookTable:
    """The periodic work, each with its period in updates or in minutes. A checkpoint first
    logs the calls' metrics not yet logged (``flush``): what they say (an environment's
    non-finite output) stops the run before a state holding it is saved."""
    c = run.config

    def save(_: int) -> None:
        flush()
        run.checkpointer.save(run.state, run.meta())

    return HookTable([
        Hook("evaluate", evaluate, every=c.eval_every),
        Hook("check replicas",
             lambda _: integrity.check_replicas(run.state.train.params, run.layout),
             every=c.check_replicas_every, seconds=60 * c.check_replicas_minutes),
        Hook("checkpoint", save, every=c.checkpoint_every, seconds=60 * c.checkpoint_minutes),
    ])


def _evaluate(run: Run, updates: int) -> dict[str, Any]:
    """Evaluate the current policy; record it, and whether every member reached the target."""
    begin = time.perf_counter()
    result = run.layout.to_host(run.evaluate(run.state.train, run.seed_keys,
                                             run.learner.env_inputs.eval))
    run.timed("evaluate", begin)
    run.evals.append({"env_steps": updates * run.sizes.batch_size, **{
        f"eval/{k}": np.atleast_1d(v).astype(float).tolist() for k, v in result.items()}})
    target = run.config.target_return
    if target is not None and run.solved_at is None and np.all(
            np.asarray(result["return_mean"]) >= target):
        run.solved_at = updates   # a population stops once EVERY member is there
    return result


def _should_stop(run: Run, call_index: int, saved: bool, flush: Callable[[], None]
                 ) -> bool:
    """Preemption (agreed by every process; saved before stopping), divergence (agreed: read
    from global metrics; not saved, the latest checkpoint stays the last one before it) or
    the target reached."""
    if run.watch.tripped is not None:
        run.status = "diverged"
        return True
    if distributed.should_stop(call_index):
        if not saved:
            flush()   # its metrics first, as a periodic checkpoint does (_hooks)
            run.checkpointer.save(run.state, run.meta())
        run.status = "preempted"
        run.reporter.message(f"stop requested: saved and stopping after update "
                             f"{run.updates_done}")
        return True
    if run.solved_at is not None:
        run.status = "solved"
        run.reporter.message(f"target return {run.config.target_return} reached after "
                             f"{run.updates_done} updates; stopping")
        return True
    return False


def _log(run: Run, writer: reporting.Background, speed: _Speed, metrics: Any, updates: int,
         steps: int, result: dict | None, done_at: tuple[float, float] | None = None,
         pbt_round: Any = None) -> None:
    """One row per member: metrics of one call (and an evaluation made right after it). The
    divergence watch reads them here (the loop's stop decision); the rows are built and
    written on ``writer``'s thread."""
    begin = time.perf_counter()
    host = run.layout.to_host(metrics)
    begin = run.timed("loop_wait_metrics", begin)   # the device's call still running
    # time_s: when the row's calls ended (a host call: when it returned, its environments
    # stepped), not when the row is logged after the NEXT call, a whole host call later
    head = {"env_steps": updates * run.sizes.batch_size, "updates": updates,
            "sps": speed.rate(steps, done_at) * (run.layout.members or 1),
            "time_s": (done_at[0] if done_at else time.perf_counter()) - run.start}
    run.watch.observe(host, updates)
    _check_environments(run, host, updates)
    if pbt_round is not None:
        pbt_round = sharding.to_host(pbt_round)   # replicated: every process reads it whole
        run.watch.replaced(pbt_round.parents)     # the round ran after these metrics
    run.timed("loop_watch", begin)
    writer.submit(_write, run, head, host, result, pbt_round)


def _check_environments(run: Run, host: dict, last_update: int) -> None:
    """Stop at a non-finite reward or observation that an environment inside the program
    returned (:data:`programs.ENV_NONFINITE`), naming it, before anything of that update is
    saved (the loop flushes these metrics before every save); with ``env_nonfinite: reset``,
    count the steps dropped instead."""
    resets = host.get(programs.ENV_NONFINITE_RESETS)
    if resets is not None:
        counts = np.asarray(resets).reshape(run.layout.members or 1, -1).sum(1)
        for m, count in enumerate(counts):
            run.env_resets[m] = run.env_resets.get(m, 0) + int(count)
    flags = host.get(programs.ENV_NONFINITE)
    if flags is None or not np.any(np.asarray(flags) > 0):
        return
    members = run.layout.members
    flags = np.asarray(flags).reshape(members or 1, -1)
    first = np.asarray(host[programs.ENV_NONFINITE_AT]).reshape(flags.shape)
    k = int(np.argmax((flags > 0).any(0)))                 # the call's first such update
    m = int(np.argmax(flags[:, k] > 0))
    update = last_update - flags.shape[1] + k + 1
    at, what = divmod(int(first[m, k]), 4)
    env, t = divmod(at, run.sizes.steps_per_env)
    process = env * distributed.process_count() // run.config.num_envs
    member = f", member {m}" if members else ""
    latest = run.checkpointer.latest_step()
    kept = (f"the latest checkpoint, update {latest}, was saved before it"
            if latest is not None else "no checkpoint was saved")
    raise EnvError(
        f"{run.env_name}: environment {env} (process {process}{member}) returned a non-finite "
        f"{('', 'reward', 'observation', 'reward and observation')[what]} at its env step "
        f"{(update - 1) * run.sizes.steps_per_env + t + 1} (update {update}); nothing of "
        f"that update was saved ({kept}). "
        f"Repair the environment, or resume with --set env_nonfinite=reset to drop such "
        f"steps and reset their environments")


def _write(run: Run, head: dict, host: dict, result: dict | None, pbt_round: Any = None
           ) -> None:
    begin = time.perf_counter()
    rows = reporting.member_rows(head, host, run.layout.members, result, run.learner.metrics)
    if run.layout.members:
        run.reporter.log_population(rows)
    else:
        run.reporter.log(rows[0])
    if pbt_round is not None:
        run.reporter.log_events(reporting.pbt_rows(head, pbt_round))
    run.record_returns(rows)
    run.reporter.advance(head["env_steps"], reporting.postfix(rows))
    run.timed("host_logging", begin)   # on the writer's thread, beside the loop


# ---------------------------------------------------------------------------------- SUMMARY

def summarize(run: Run) -> dict[str, Any]:
    begin = time.perf_counter()
    stats = integrity.member_stats(run.state.train.params, run.layout)
    pbt_state = hparams = None
    if run.learner.pbt is not None:   # a collective: every process gathers them
        pbt_state, hparams = run.layout.to_host((run.state.pbt, run.state.train.hparams))
    summary = summary_lib.build(run, stats, pbt_state, hparams)
    run.timed("summary", begin)
    summary["time_s"] = {k: round(v, 3) for k, v in {
        **run.timing, "compile_and_init": run.compile_time, "loop": run.loop_time}.items()}
    skipped = int(run.watch.total.sum())
    if skipped and run.status != "diverged":
        members = sorted(run.watch.diverged)
        run.reporter.message(
            f"{skipped} update(s) had non-finite values and were skipped (metric "
            f"{programs.SKIPPED}); the run went on from the last finite parameters"
            + (f"; member(s) {', '.join(map(str, members))} diverged (summary.json: diverged)"
               if members else ""))
    run.reporter.finish(summary)
    return summary


__all__ = ["train", "param_stats", "RunError", "ConfigError", "CheckpointError"]
