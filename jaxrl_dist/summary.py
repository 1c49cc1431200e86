"""The run summary: one dict per run (printed, written to summary.json, returned by ``train``),
with a population's per-member rows and their mean, IQM and CIs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import jax

import jaxrl_dist
from jaxrl_dist import distributed, pbt, population
from jaxrl_dist.types import RunState

if TYPE_CHECKING:
    from jaxrl_dist.run import Run


def rebuilt_on_resume(run: Run) -> list[str]:
    """The slots a resumed run started afresh: those a learner keeps out of checkpoints
    (``pbt``, which exists only with PBT and is then always saved, is never one)."""
    if not run.first_update:
        return []
    return [name for name in RunState._fields
            if name != "pbt" and name not in run.checkpointer.saved]


def build(run: Run, stats: list[tuple[float, str]], pbt_state: Any = None,
          hparams: Any = None) -> dict[str, Any]:
    """The summary of a finished run; ``stats``: each member's (parameter norm, fingerprint);
    with PBT, the final PBT state and hyperparameters read back (the lineage)."""
    c, sizes, layout = run.config, run.sizes, run.layout
    count = layout.members or 1
    last = run.evals[-1] if run.evals else None

    def member_row(m: int) -> dict[str, Any]:
        return {"param_norm": stats[m][0], "param_fingerprint": stats[m][1],
                "final_return": run.final_return.get(m),
                "best_return": run.best_return.get(m),
                "eval_return": last["eval/return_mean"][m] if last else None,
                "eval_return_std": last["eval/return_std"][m] if last else None,
                **({"eval_win_rate": last["eval/win_rate"][m]}   # environments with an
                   if last and "eval/win_rate" in last else {}),  # outcome (SMAX)
                # updates dropped as non-finite this session (a diverged run stopped on them)
                "nonfinite_skipped": int(run.watch.total[m]) if run.watch is not None else 0,
                # steps dropped (environments reset) this session: env_nonfinite=reset
                "env_nonfinite_resets": run.env_resets.get(m, 0)}

    steps_this_session = (run.updates_done - run.first_update) * sizes.batch_size
    summary = {
        "env": run.env_name, "status": run.status,
        "env_steps": run.updates_done * sizes.batch_size, "updates": run.updates_done,
        "wall_time_s": time.perf_counter() - run.start, "compile_time_s": run.compile_time,
        "compile_programs_s": {k: round(v, 3) for k, v in dict(run.compile_programs).items()},
        "sps": steps_this_session * count / max(run.loop_time, 1e-9),
        **member_row(0),
        # when the evaluation above ran: the end, or earlier where the run stopped between them
        "eval_env_steps": last["env_steps"] if last else None,
        "eval_episodes": c.eval_episodes, "solved_return": c.solved_return,
        "solved_at_env_steps": run.solved_at * sizes.batch_size if run.solved_at else None,
        "periodic": run.hooks, "compile_cache": run.cache,
        "algo": c.algo, "checkpointed": list(run.checkpointer.saved),
        # slots a resumed run started afresh (e.g. a replay buffer left out: refilled)
        "rebuilt_on_resume": rebuilt_on_resume(run),
        # why the run (or, in a population, each member) stopped on non-finite updates
        "diverged": ({str(m): why for m, why in run.watch.diverged.items()}
                     if run.watch is not None and run.watch.diverged else None),
        "num_devices": layout.mesh.size, "num_processes": distributed.process_count(),
        "replicate_learn": run.learner.replicated,
        "replicate_act": run.learner.acts_whole,
        "device_kind": run.device_kind, "matmul_precision": c.matmul_precision,
        # what the update compiled with beyond XLA's defaults (on GPUs, gpu_command_buffers)
        "xla_options": dict(run.learner.speed_options or {}),
        "jax_version": jax.__version__, "jaxrl_dist_version": jaxrl_dist.__version__,
        "run_dir": str(run.run_dir),
    }
    if layout.members:
        rows = [member_row(m) for m in range(count)]
        if pbt_state is not None:   # each member's hyperparameters as it ended
            for m, row in enumerate(rows):
                row["final_hparams"] = {k: float(str(v[m])) for k, v in hparams.items()}
        summary.update(population.summarize(c, rows, layout.describe()))
    if pbt_state is not None:
        summary["pbt"] = pbt_summary(run, pbt_state, hparams)
    return summary


def pbt_summary(run: Run, pbt_state: Any, hparams: dict[str, Any]) -> dict[str, Any]:
    """Rounds run, the last fitness, and every copy (round, source, target, old and new
    hyperparameters), from the state alone: complete across resumes."""
    settings = run.learner.pbt
    start = population.hparams(run.config)
    names = [m.name for m in settings.mutations]
    return {"rounds": int(pbt_state.round[0]), "round_updates": list(settings.rounds),
            "fitness": [float(f) for f in pbt_state.fitness],
            "copies": pbt.lineage(pbt_state.parents, pbt_state.history,
                                  {n: start[n] for n in names}, settings.rounds),
            "final_hparams": {n: [float(str(v)) for v in hparams[n]] for n in names}}
