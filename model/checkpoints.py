"""A run's checkpoints, RUN_DIR/checkpoints/step-N.pt, and the decisions of a resume.

A checkpoint is one torch.save'd dict: step; the model's, optimizer's and schedule's states; config (the model's
JSON, which names its architecture); ranks (each rank's RNG states and data position, so every rank resumes
exactly); the run's plan under PLAN, flat (TrainPlan.flat(): {flag name: value}, what a resume compares with);
objective, vocab (the manifest's entry) and max_seq_length (export-hf's); warmup; data, the identity of the training
data (manifest.fingerprint), which a resume must hold again; positions_trained, the positions this run and the
weights it started from (--init-from) trained, export-hf's model_max_length. Older checkpoints lack the last six:
they are nsp runs, export-hf looks their vocab up in --data's manifest, their warmup is worked out from their plan,
and they resume on the data the other checks accept; their plans hold fewer flags (`saved_plan`).

A checkpoint loads as data (`load`): torch.load(weights_only=True), whose unpickler builds tensors and plain values
(dict, list, tuple, str, int, float, bool, None) and refuses any other global before anything in the file runs, so a
shared run or checkpoint (what --init-from invites) cannot run code. Everything is stored so: the RNG states as
tensors and ints (`rng_state`), the plan, the data fingerprint and the loader's position as plain values, the model's
config as its JSON. Checkpoints written before this held numpy's RNG state as an ndarray: the numpy globals that
rebuild one uint32 array, and no other, are allowed for them (`OLD_CHECKPOINT_GLOBALS`). A file that needs anything
else is refused in one line naming what it holds (`CheckpointError`).

Rank 0 writes them in a background thread (`CheckpointWriter`), atomically, keeping the last --keep-checkpoints.
Rank 0 alone also decides what to do with --output (refuse, clear, resume from which checkpoint) and tells the other
ranks (`start_run_dir`). A resume runs the run's own plan with the flags given on its command line applied or refused
as plan.RESUME says (`resumed_plan`), and the checkpoints it writes record that plan, what ran; `check_resumable`
refuses a resume that could not go on where the checkpoint stopped.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import pickle
import random
import re
import shutil
import threading

import numpy as np
import torch
import torch.distributed as dist

from model import architectures
from model.plan import RESUME, RunError, RunPlan, TrainPlan, flag_of
from model.ranks import Ranks, check_shared

try:
    from numpy._core.multiarray import _reconstruct   # numpy 2
except ImportError:
    from numpy.core.multiarray import _reconstruct    # numpy 1.26
# The checkpoint's entry of the run's plan, flat: its name on disk since the first checkpoint, kept so that every
# checkpoint reads alike.
PLAN = "args"


def checkpoint_path(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "checkpoints", f"step-{step:08d}.pt")


def latest_checkpoint(run_dir: str) -> str | None:
    paths = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*.pt")))
    return paths[-1] if paths else None


def checkpoint_objective(checkpoint: dict) -> str:
    """What a checkpoint was trained on: nsp | sop | none (which heads it has); checkpoints older than the choice
    are nsp."""
    return checkpoint.get("objective", "nsp")


def saved_plan(checkpoint: dict) -> dict:
    """The run's plan as its checkpoint holds it, {flag name: value} (TrainPlan.flat()); an older checkpoint's lacks
    the flags added since, so a reader asks for each with its default."""
    return checkpoint.get(PLAN, {})


# What a checkpoint written before checkpoints loaded as data holds besides tensors and plain values: numpy's RNG
# state as np.random.get_state() gives it, a uint32 ndarray, which pickles as an ndarray _reconstruct'ed (under
# numpy 2's module name or numpy 1's, as the run that wrote it had) with a dtype, its state set on a uint32 dtype.
# Nothing else is allowed; new checkpoints need none.
OLD_CHECKPOINT_GLOBALS = [(_reconstruct, "numpy._core.multiarray._reconstruct"),
                          (_reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
                          type(np.dtype(np.uint32))]


class CheckpointError(RunError):
    """A file that does not load as data: `why` (after its path) names the globals it holds beyond what is allowed."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path} {why}")
        self.why = why


def load(path: str) -> dict:
    """A checkpoint's dict, its tensors on the CPU, loaded as data (module doc); CheckpointError where it holds more."""
    return load_as_data(path, OLD_CHECKPOINT_GLOBALS)


def load_as_data(path: str, allowed: list | tuple = (), **options):
    """torch.load(path, weights_only=True), onto the CPU, with the globals `allowed` besides torch's own (`options`:
    torch.load's, e.g. mmap); CheckpointError naming the globals the file holds beyond them, before any of it runs.
    Other errors (a truncated or damaged file) are torch's, for the caller to word."""
    with torch.serialization.safe_globals(list(allowed)):
        try:
            return torch.load(path, map_location="cpu", weights_only=True, **options)
        except pickle.UnpicklingError as e:
            names = _refused_globals(path, e)
            if not names:
                raise
    raise CheckpointError(path, f"holds {names}: a checkpoint loads as data only (tensors and plain values), so it "
                                "is refused and nothing in it ran")


def _refused_globals(path: str, error: pickle.UnpicklingError) -> str:
    """The globals of `path` the weights-only unpickler does not allow, in words: every one its pickle names (read
    without running it), else, in torch's legacy format, the one `error` names; "" where it refused something else."""
    try:
        names = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except (ValueError, RuntimeError, OSError, pickle.UnpicklingError):   # not a zip file: torch's legacy format
        names = re.findall(r"GLOBAL ([\w.]+)", str(error))[:1]
    return ", ".join(names)


def rng_state() -> dict:
    """This process's RNG states as tensors and plain values: python's tuple of ints, numpy's MT19937 state with its
    key as an int64 tensor (not the uint32 ndarray np.random.get_state gives: an ndarray is not data to torch.load),
    torch's and each CUDA device's byte tensors."""
    name, key, pos, has_gauss, gauss = np.random.get_state()
    numpy = {"bit_generator": name, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
             "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)}
    return {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    """Puts back `rng_state`'s states, or an older checkpoint's (numpy's as np.random.get_state's tuple)."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    if isinstance(numpy, dict):
        numpy = (numpy["bit_generator"], numpy["key"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"],
                 numpy["cached_gaussian"])
    np.random.set_state(numpy)
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(session, step: int) -> str:
    """Saves checkpoints/step-N.pt: each rank's RNG states and data position gathered into it (so every rank
    resumes exactly), the states copied off the device, then written by rank 0 in the background
    (`CheckpointWriter`): no rank waits for the file, and training goes on while it is written. `session` is the
    run's (model/train.py)."""
    own = {"rng": rng_state(), "loader": session.loader.state_dict()}
    ranks = [None] * session.ranks.world if session.ranks.ddp else [own]
    if session.ranks.ddp:
        dist.all_gather_object(ranks, own, group=session.ranks.control)
    path = checkpoint_path(session.plan.run.output, step)
    if session.ranks.master:
        checkpoint = {"step": step, "model": session.model.state_dict(), "optimizer": session.optimizer.state_dict(),
                      "scheduler": session.scheduler.state_dict(), "config": session.config.to_json(), "ranks": ranks,
                      PLAN: session.plan.flat(), "objective": session.shards.objective,
                      "vocab": session.shards.vocab, "max_seq_length": session.shards.shape.max_seq_length,
                      "warmup": session.warmup, "data": session.shards.fingerprint,
                      "positions_trained": session.positions_trained}
        session.writer.write(_copied(checkpoint), path, session.plan.run.keep_checkpoints)
    return path


def _copied(state):
    """A state with every tensor copied to host memory: a snapshot the next optimizer step cannot change."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: _copied(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_copied(v) for v in state)
    return state


class CheckpointWriter:
    """Rank 0's checkpoint files, written one at a time in a background thread: atomically (a temp file, fsync, then
    os.replace, so a reader or a resume never sees half a file) and the last --keep-checkpoints kept. `wait` joins
    the write under way and raises its error, if any; the next write and the end of the run wait for the last."""

    def __init__(self):
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def write(self, checkpoint: dict, path: str, keep: int) -> None:
        self.wait()
        self.thread = threading.Thread(target=functools.partial(self._write, checkpoint, path, keep), name="checkpoint")
        self.thread.start()

    def _write(self, checkpoint: dict, path: str, keep: int) -> None:
        try:
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            for old in sorted(glob.glob(os.path.join(os.path.dirname(path), "step-*.pt")))[:-keep]:
                os.remove(old)
        except BaseException as e:  # raised where the run waits for it
            self.error = e

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise RunError(f"writing a checkpoint failed: {error}")


def restore(checkpoint: dict, model, optimizer, scheduler, loader, rank: int) -> int:
    """Puts a checkpoint's states back (weights, optimizer, schedule, this rank's data position in the data.Loader
    `loader`, and its RNGs); returns its step."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    own = checkpoint["ranks"][rank]
    loader.load_state_dict(own["loader"])
    set_rng_state(own["rng"])
    return checkpoint["step"]


def _data(fingerprint: dict) -> str:
    return (f"{fingerprint['files']} file(s) of {fingerprint['bytes']:,} bytes (fingerprint "
            f"{fingerprint['sha256'][:12]})")


def start_run_dir(run: RunPlan, ranks: Ranks) -> str | None:
    """Readies --output: refuses an old run unless --resume or --overwrite (which clears it); returns the
    checkpoint to resume from, if any.

    Rank 0 alone looks at --output and decides (refuse, clear, resume from which checkpoint), then tells the others,
    so every rank takes the same path through the same collectives, however late it looks. First every rank checks
    that it sees the file rank 0 writes there: only rank 0 writes checkpoints, so an --output that is not one shared
    directory would resume the ranks from different steps (they would drift apart, or hang); it stops every rank."""
    check_shared(run.output, ranks)
    decision = _run_dir_decision(run) if ranks.master else None
    if ranks.ddp:
        message = [decision]
        dist.broadcast_object_list(message, src=0, group=ranks.control)
        decision = message[0]
    if "refuse" in decision:
        raise RunError(decision["refuse"])
    if run.resume and decision["resume"] is None and ranks.master:
        print(f"--resume: no checkpoint in {run.output} yet, starting from step 0")
    return decision["resume"]


def _run_dir_decision(run: RunPlan) -> dict:
    """Rank 0's look at --output: {"refuse": why} or {"resume": the checkpoint or None}, an old run cleared first
    where --overwrite says so."""
    previous = [os.path.join(run.output, name) for name in ("log.jsonl", "tb", "checkpoints", "config.json")
                if os.path.exists(os.path.join(run.output, name))
                and not (name == "checkpoints" and not os.listdir(os.path.join(run.output, name)))]
    if previous and not run.resume:
        if not run.overwrite:
            return {"refuse": f"{run.output} already holds a run: pass --resume to continue it or --overwrite to "
                              "start over"}
        for path in previous:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return {"resume": latest_checkpoint(run.output) if run.resume else None}


def ran_plan(checkpoint: dict) -> dict:
    """What the checkpoint's run ran, flat: its plan, the defaults for flags added since it was written, and the
    values that took effect: its model config's attention dropout (and rotary bases), and its warmup steps."""
    ran = {**TrainPlan.defaults(), **saved_plan(checkpoint)}
    config = architectures.config_from_json(checkpoint["config"])
    ran["attention_dropout"] = config.attention_probs_dropout
    ran.update(architectures.rope_bases(config))   # a rotary model's bases, likewise
    if "warmup" in checkpoint:   # older checkpoints: train.schedule_warmup works it out from their plan
        ran["warmup_steps"] = checkpoint["warmup"]
    return ran


def resumed_plan(checkpoint: dict, plan: TrainPlan) -> tuple[TrainPlan, list[str]]:
    """The plan a resume runs, and the lines that say what it applied: the run's own (`ran_plan`) with each flag
    `plan`'s command line gave taken as plan.RESUME says. A flag that is Refused there, given with another value,
    is a RunError naming every such flag in one line; a Positional one is checked by check_resumable."""
    ran, now, given = ran_plan(checkpoint), plan.flat(), plan.given_flags()
    if "model" in given and now["model"] != ran["model"] and same_model(now["model"], checkpoint):
        now["model"] = ran["model"]   # the run's model by another name: a preset of its config, a copy of its JSON
    values, applied, refused = {"given": given}, [], []
    for name, kind in RESUME.items():
        resumed = kind.resumed(flag_of(name), now[name], ran[name], name in given)
        values[name] = resumed.value
        applied += [resumed.applied] if resumed.applied else []
        refused += [resumed.refused] if resumed.refused else []
    output = plan.run.output
    if refused:
        raise RunError(f"cannot resume {output} with {'; '.join(refused)}. A resume goes on with the run's own "
                       f"settings: leave {'it' if len(refused) == 1 else 'them'} out, or start a new run with "
                       f"{'it' if len(refused) == 1 else 'them'} (--output NEW_DIR; --init-from {output} starts it "
                       "from this run's weights)")
    return TrainPlan.from_flat(values), [f"resume: {line} from step {checkpoint['step']}" for line in applied]


def same_model(spec: str, checkpoint: dict) -> bool:
    """Whether --model `spec` describes the checkpoint's model: every field of its config alike but those the run
    sets itself (the data's vocab, for a preset; the rows that are tokens; the attention dropout, a flag's)."""
    config = architectures.config_from_json(checkpoint["config"])
    named = architectures.from_name_or_json(spec)
    if type(named) is not type(config):
        return False
    ours = {"tokenizer_size", "attention_dropout"} | ({"vocab_size"} if spec in architectures.presets() else set())
    return all(getattr(named, f.name) == getattr(config, f.name) for f in dataclasses.fields(config)
               if f.name not in ours)


def check_resumable(checkpoint: dict, plan: TrainPlan, ranks: Ranks, objective: str, train_files: int,
                    micro_batch: int, fingerprint: dict | None = None, length: int | None = None) -> None:
    """Refuses a resume that cannot go on where the checkpoint stopped, naming what differs: the data (--data's
    `fingerprint`, its rows of `length`: --resume is the same run, --init-from a new one; its objective,
    `objective`, named first), --steps, or what the data position depends on (world size, readers, rows per
    micro-step, the `train_files` training files)."""
    output, schedule = plan.run.output, plan.schedule
    if checkpoint_objective(checkpoint) != objective:
        raise RunError(f"{output} was trained with objective {checkpoint_objective(checkpoint)} and --data "
                       f"holds objective {objective} shards: resume on the same objective, or start a new run")
    then = checkpoint.get("data")
    if then and fingerprint and then["sha256"] != fingerprint["sha256"]:
        raise RunError(f"cannot resume {output} on this --data: it was trained on {_data(then)} and --data now "
                       f"holds {_data(fingerprint)}, other data. --resume continues the same run on the same data; to "
                       f"go on from its weights on these shards (a new phase), start a new run with "
                       f"{new_phase(checkpoint, output, length)}")
    if checkpoint["step"] > schedule.steps:
        raise RunError(f"--steps {schedule.steps}, but {output} is at step {checkpoint['step']} already: give a "
                       "larger --steps to go on")
    saved, before = checkpoint["ranks"][0]["loader"], saved_plan(checkpoint)
    differ = []
    if saved["world_size"] != ranks.world:
        differ.append(f"world size: {saved['world_size']} in the checkpoint, {ranks.world} now")
    if saved["readers"] != max(1, plan.data.num_workers):  # 0 and 1 workers both read as one
        differ.append(f"--num-workers: {before.get('num_workers', saved['readers'])} in the checkpoint, "
                      f"{plan.data.num_workers} now")
    if saved["batch_size"] != micro_batch:
        then = (f" = {before['batch_size']} / ({saved['world_size']} x {before['grad_accum']})"
                if "grad_accum" in before else "")
        differ.append(f"rows per rank and micro-step (--batch-size / (world size x --grad-accum)): "
                      f"{saved['batch_size']}{then} in the checkpoint, {micro_batch} = {schedule.batch_size} / "
                      f"({ranks.world} x {schedule.grad_accum}) now")
    if saved["files"] != train_files:
        now = plan.flat()
        held_out = [bool(flags.get("eval_every")) and not flags.get("eval_data") for flags in (before, now)]  # split
        why = ("--eval-every without --eval-data holds the last file out: pass the same --eval-every/--eval-data "
               "as the run you resume" if "eval_every" in before and held_out[0] != held_out[1]
               else "resume on the same --data")
        differ.append(f"training files: {saved['files']} in the checkpoint, {train_files} now ({why})")
    if differ:
        raise RunError(f"cannot resume {output} where it stopped: " + "; ".join(differ))


def new_phase(checkpoint: dict, output: str, length: int | None) -> str:
    """The flags of a new run from the checkpoint's weights on data of rows of `length` (None: unknown), its position
    table grown where the rows are longer than it has positions."""
    positions = architectures.config_from_json(checkpoint["config"]).max_position_embeddings
    grow = f" --max-position-embeddings {length}" if length is not None and length > positions else ""
    return f"--init-from {output}{grow} --output NEW_DIR"
