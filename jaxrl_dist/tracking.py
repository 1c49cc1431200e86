"""Weights & Biases beside the run's own files, from process 0 only (DESIGN.md section 7).

W&B is a mirror of metrics.jsonl, never a dependency of training: a missing package, login or
server is one line at start-up, before anything is compiled or saved; a failure once training
runs is one warning, after which the run goes on without W&B. With ``wandb.mode: disabled``
(the default) nothing here imports wandb. The run's W&B id is kept in ``RUN_DIR/wandb_id``, so
``--resume`` continues the same W&B run. jax-free.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from jaxrl_dist import faults
from jaxrl_dist.config import WandbConfig
from jaxrl_dist.errors import UserError
from jaxrl_dist.protocol import EXIT_PREEMPTED

ID_FILE = "wandb_id"


def _import_wandb(mode: str):
    try:
        import wandb
    except ImportError as e:
        raise UserError(f"wandb.mode is {mode} but wandb cannot be imported ({e}); install it "
                        f"(pip install -c constraints.txt -e '.[wandb]') or set "
                        f"wandb.mode=disabled") from None
    return wandb


def check(section: WandbConfig) -> None:
    """A run that logs to W&B needs the package: one line before anything is built."""
    if section.mode != "disabled":
        _import_wandb(section.mode)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def logged_through(metrics: Path) -> int:
    """The last ``env_steps`` metrics.jsonl holds (-1 for none): on resume, W&B already holds
    every row up to there (process 0 sends each row to W&B right after writing it), and a W&B
    run's steps only increase, so the rows redone after the checkpoint are not sent again."""
    last = -1
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                last = max(last, int(json.loads(line)["env_steps"]))
            except (ValueError, KeyError, TypeError):   # a line torn by a full disk
                continue
    return last


def start(section: WandbConfig, config_dict: dict[str, Any], run_dir: Path,
          resume: bool) -> Tracker | None:
    """Open the W&B run (``None`` when disabled): its files under ``run_dir/wandb/``, its id
    from ``run_dir/wandb_id`` when resuming (kept there for the next resume), the run config
    as its config, wandb's own console output off. Any failure is one :class:`UserError`."""
    if section.mode == "disabled":
        return None
    wandb = _import_wandb(section.mode)
    id_file = run_dir / ID_FILE
    run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
    skip_through = logged_through(run_dir / "metrics.jsonl") if run_id and resume else -1
    with faults.writing("creating", run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    try:
        run = wandb.init(
            mode=section.mode, project=section.project, entity=section.entity,
            group=section.group, name=section.name or run_dir.resolve().name,
            tags=list(section.tags) or None, config=config_dict, dir=str(run_dir),
            id=run_id, resume="allow",
            settings=wandb.Settings(silent=True, console="off"))
    except Exception as e:   # no login, no server, a bad entity: wandb's own words, one line
        hint = (" (log in with `wandb login` or WANDB_API_KEY, or use wandb.mode=offline "
                "and `wandb sync` later)" if section.mode == "online" else "")
        raise UserError(f"wandb.init ({section.mode}) failed: {_first_line(e)}{hint}") from None
    with faults.writing("writing", id_file):
        tmp = id_file.with_name(ID_FILE + ".tmp")
        tmp.write_text(run.id + "\n")
        tmp.replace(id_file)
    return Tracker(run, skip_through, wandb.teardown)


class Tracker:
    """One W&B run, mirroring metrics.jsonl rows with the step in global env steps. A W&B call
    that fails is one warning (returned for the reporter to print), then W&B is dropped."""

    def __init__(self, run: Any, skip_through: int = -1, teardown: Any = None):
        self.run = run
        self.skip_through = skip_through   # rows up to this step are in W&B already
        self.teardown = teardown   # stops wandb's service process (the CLI ends with _exit)

    def _call(self, what: str, fn, *args: Any, **kwargs: Any) -> str | None:
        try:
            fn(*args, **kwargs)
        except Exception as e:   # noqa: BLE001 - W&B must never end training
            self.run = None
            return (f"W&B {what} failed ({_first_line(e)}); training goes on without W&B "
                    f"(metrics.jsonl has every row)")
        return None

    def log(self, data: dict[str, Any]) -> str | None:
        """Log one row at step ``data["env_steps"]``, nulls left out (no episode ended, a
        non-finite value: W&B plots numbers); a warning on the first failure, else None."""
        step = int(data["env_steps"])
        if self.run is None or step <= self.skip_through:
            return None
        return self._call("logging", self.run.log,
                          {k: v for k, v in data.items() if v is not None}, step=step)

    def finish(self, exit_code: int, summary: dict[str, Any] | None = None) -> str | None:
        """Close the run with the process's exit code (a preempted run marked as such) and
        summary.json's numbers as its summary. Idempotent."""
        if self.run is None:
            return None
        run = self.run
        if summary:
            warning = self._call("writing the summary", run.summary.update, {
                k: v for k, v in summary.items() if isinstance(v, (bool, int, float, str))})
            if warning:
                return warning
        if exit_code == EXIT_PREEMPTED:
            warning = self._call("marking the run preempted", run.mark_preempting)
            if warning:
                return warning
        warning = self._call("finishing", run.finish, exit_code=exit_code)
        if warning is None and self.teardown is not None:
            warning = self._call("stopping its service", self.teardown)
        self.run = None
        return warning

    def fail(self, exit_code: int) -> str | None:
        return self.finish(exit_code)


def population_row(rows: list[dict[str, Any]], shared: tuple[str, ...],
                   spread: dict[str, tuple[float, float, float]]) -> dict[str, Any]:
    """One W&B history row for one call of a population: the ``shared`` fields (and
    ``env_steps``) once, each member's others as ``member/NNN/name``, and the population's
    ``spread`` (name -> mean, min, max) as ``population/name/mean`` (min, max)."""
    head = ("env_steps", *shared)
    data = {k: rows[0][k] for k in head if rows[0].get(k) is not None}
    for row in rows:
        prefix = f"member/{row['member']:03d}/"
        data.update({prefix + k: v for k, v in row.items() if k not in head and k != "member"})
    for name, values in spread.items():
        data.update({f"population/{name}/{stat}": v
                     for stat, v in zip(("mean", "min", "max"), values)})
    return data


def exit_code(error: BaseException) -> int:
    """The exit code a failure ends the process with (the CLI's): a user error's own code,
    SystemExit's, else 1."""
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else 1
    if isinstance(error, KeyboardInterrupt):
        return 130
    return getattr(error, "exit_code", 1)


@contextlib.contextmanager
def finished_on_error(owner: Any) -> Iterator[None]:
    """A failure inside closes the W&B run with the failure's exit code, then goes on up.
    ``owner``: a :class:`Tracker`, a reporter (which lets the row being written finish
    first) or None."""
    try:
        yield
    except BaseException as e:
        if owner is not None:
            warning = owner.fail(exit_code(e))
            if warning:
                print(warning, file=sys.stderr, flush=True)
        raise

