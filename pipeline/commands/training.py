"""The trainer's commands, `bertprep train`, `export-hf` and `plot`: each one's flags, the checks that need no run,
and a handler that runs model/'s code and turns what it refuses into one line on stderr, exit 2.

`train`'s flags make a TrainPlan (model/plan.py), the run's settings in groups, frozen: each flag's default is its
group dataclass's, written there once. What only a run can find (the run directory, the data, a resumed checkpoint,
another rank) comes back from it as a typed error. model/'s torch modules are imported inside the functions that
use them: `plot` imports no torch, and neither does the command table.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from model import plot
from model.plan import DEFAULT_MODEL, RESUME, RunError, RunPlan, TrainPlan, flag_of
from model.schedules import DECAY_SHAPES, KINDS, WSD_DECAY_FRACTION
from pipeline.commands import flags, groups
from pipeline.commands.flags import (device_name, dropout_probability, fraction, nonnegative_float, nonnegative_int,
                                     positive_float, positive_int, probability, rotary_base)


# ---- train ---------------------------------------------------------------------------------------------------------

def add_train(p: argparse.ArgumentParser) -> None:
    """Adds every `bertprep train` flag to `p`, grouped as in --help; their defaults are TrainPlan's groups'."""
    for name, add in (("data", _train_data_flags), ("model", _train_model_flags),
                      ("optimisation", _train_optimisation_flags), ("run", _train_run_flags)):
        add(p.add_argument_group(name))
    p.set_defaults(**TrainPlan.defaults())
    p.record_given = True   # flags.Parser's args.given: a resume keeps the run's value of every flag not given
    resume = next(action for action in p._actions if action.dest == "resume")
    resume.help += " " + resume_help(p) + " A run already at --steps says so: give a larger --steps to go on"


def _train_data_flags(g) -> None:
    """`bertprep train`'s data group: what the run reads, and the masking of --dynamic-masking."""
    g.add_argument("--data", required=True,
                   help="masked-LM shards, packed or not (not both): a directory, a glob or a comma list")
    g.add_argument("--eval-data", help="held-out shards (default: the validation set --data was made with, "
                                       "DIR/validation/; without one, the last training file, with a warning)")
    g.add_argument("--max-seq-length", type=positive_int, help="required for shards without a manifest (google-made)")
    g.add_argument("--max-predictions-per-seq", type=positive_int,
                   help="required for shards without a manifest; with --dynamic-masking default max(20, "
                        "round(L x --masked-lm-prob)): 20 at L=128, 77 at L=512")
    g.add_argument("--allow-incomplete", action="store_true", help="read shards whose directory has no manifest")
    g.add_argument("--dynamic-masking", action="store_true",
                   help="--data is a `pairs` output: mask it afresh every epoch (RoBERTa-style) instead of reading "
                        "masked shards; masking flags below, --max-predictions-per-seq default max(20, "
                        "round(L x --masked-lm-prob))")
    # the masking flags `mask` has (their defaults the recipe's, built by the same groups.mask_recipe)
    g.add_argument("--masked-lm-prob", type=probability, default=groups.MASK.masked_lm_prob,
                   help="with --dynamic-masking")
    g.add_argument("--mask-token-prob", type=probability, default=groups.MASK.mask_token_prob,
                   help="with --dynamic-masking: chosen tokens replaced by [MASK] (NeoBERT: 1 with "
                        "--random-token-prob 0)")
    g.add_argument("--random-token-prob", type=probability, default=groups.MASK.random_token_prob,
                   help="with --dynamic-masking: chosen tokens replaced by a random non-special id; the rest are kept")
    g.add_argument("--whole-word-mask", action="store_true", help="with --dynamic-masking")
    g.add_argument("--ngram-max", type=positive_int, default=groups.MASK.ngram_max, help="with --dynamic-masking")
    g.add_argument("--masked-lm-prob-end", type=probability, metavar="P",
                   help="with --dynamic-masking: the rate goes linearly from --masked-lm-prob at the run's first "
                        "micro-batch to P at its last (mmBERT lowers it phase by phase: 0.3, 0.15, 0.05); batches are "
                        "sized for the higher of the two. Default: none, the rate stays --masked-lm-prob")
    g.add_argument("--eval-masked-lm-prob", type=probability, metavar="P",
                   help="with --dynamic-masking: mask the held-out pairs at P instead of --masked-lm-prob (ModernBERT "
                        "trains at 0.3 and evaluates at 0.15). Default: --masked-lm-prob")
    g.add_argument("--num-workers", type=nonnegative_int, help="DataLoader workers per rank")
    g.add_argument("--shuffle-buffer", type=positive_int, help="records in each worker's shuffle buffer")


def _train_model_flags(g) -> None:
    """`bertprep train`'s model group: the model and how it runs."""
    from model import architectures   # torch, which `train` imports anyway: not at this module's import
    from model.attention import PACKED_ATTENTIONS

    keys = "; ".join(f"{entry.name}'s, any left out its base size's ({'; '.join(f'{k}: {v}' for k, v in entry.keys.items())})"
                     for entry in architectures.ARCHITECTURES.values())
    g.add_argument("--model", help=f"{'|'.join(architectures.presets())} (BERT's sizes, and ModernBERT's: masked LM "
                                   "only, on --objective none shards), or a config JSON: a transformers config.json of "
                                   "model_type bert or modernbert (as export-hf and save_pretrained write it) for a "
                                   "fresh model of its shape, or our keys (a run's config.json; its architecture "
                                   f"field names it, none: bert): {keys} (default {DEFAULT_MODEL}; with --init-from "
                                   "the source's, and --model may only name its shape)")
    g.add_argument("--init-from", metavar="SOURCE",
                   help="start a new run from trained weights (BERT's phase 2 from phase 1, continued pretraining of a "
                        "released checkpoint): a bertprep run directory (its latest checkpoint), a checkpoint file, or "
                        "a local Hugging Face BERT or ModernBERT directory (config.json with model.safetensors, a "
                        "sharded model.safetensors.index.json or pytorch_model.bin; BertForPreTraining, "
                        "BertForMaskedLM or BertModel weights, ModernBertForMaskedLM or ModernBertModel ones: "
                        "ModernBERT, Ettin, mmBERT). Step 0, the schedule of --steps/--warmup-steps/--lr and a fresh "
                        "optimizer; "
                        "the architecture is the source's. --data must have the source's vocab and casing (a "
                        "directory's tokenizer.json: the same file, or the same tokens and ids; a ModernBERT "
                        "config.json's cls, sep, pad and mask ids: the data's). The first "
                        "lines say which tensors loaded, which start fresh and why, which went unused. With --resume, "
                        "a run that has a checkpoint goes on from it")
    g.add_argument("--init-optimizer-state", action="store_true",
                   help="with --init-from a bertprep run: carry its optimizer's moments too (NVIDIA's phase 2 with "
                        "LAMB); the same --optimizer")
    g.add_argument("--max-position-embeddings", type=positive_int, metavar="N",
                   help="with --init-from, for rows longer than the source has positions: BERT's position table "
                        "grown to N rows, the new rows copied from the trained ones in order (row i from row i mod the "
                        "old size), as Longformer extended RoBERTa's 512 to 4,096; ModernBERT's limit raised to N "
                        "(rotary positions: there is no table to grow; config.json records it; --rope-theta raises "
                        "the base with it) (default: the source's as it is)")
    g.add_argument("--rope-theta", type=rotary_base, metavar="THETA",
                   help="ModernBERT: the rotary base of its full-attention layers (default: the --model config's or "
                        "the source's; ModernBERT's 160,000). With --init-from on longer rows and "
                        "--max-position-embeddings, ModernBERT's context extension (it trained at 1,024 with 10,000, "
                        "then at 8,192 with 160,000); recorded in config.json")
    g.add_argument("--rope-theta-local", type=rotary_base, metavar="THETA",
                   help="ModernBERT: the rotary base of its sliding-window layers (default: the config's; "
                        "ModernBERT's 10,000), likewise")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="torch.compile the model (default: on CUDA, where it fuses the elementwise work between the "
                        "matmuls; --no-compile for eager). Shapes are fixed by the shards, so it compiles once")
    g.add_argument("--attention-dropout", type=dropout_probability, metavar="P",
                   help="dropout on attention probabilities, 0 <= P < 1 (default: the --model config's; the presets "
                        "keep google's 0.1), recorded in config.json. 0, as ModernBERT and MosaicBERT train, lets "
                        "packed rows on CUDA run varlen FlashAttention over each row's instances, which has no "
                        "dropout; with P > 0 they run SDPA's memory-efficient kernel with a block mask")
    g.add_argument("--attention", choices=("auto", *PACKED_ATTENTIONS),
                   help="packed rows' attention: auto is varlen where it can run (CUDA with FlashAttention, attention "
                        "dropout 0), else flex_attention (CUDA with Triton, attention dropout 0), else sdpa; one asked "
                        "for where it cannot run falls back to sdpa with a warning. Unpacked rows run sdpa with a "
                        "padding mask")


def _train_optimisation_flags(g) -> None:
    """`bertprep train`'s optimisation group: the optimizer and its schedule."""
    from model.optim import OPTIMIZERS   # torch, as _train_model_flags

    g.add_argument("--steps", type=positive_int,
                   help="optimizer steps; the schedule ends here (on --resume with another --steps the decay "
                        "is stretched to the new total, the run's warmup kept)")
    g.add_argument("--batch-size", type=positive_int,
                   help="global batch: rows per optimizer step (a packed row holds several instances)")
    g.add_argument("--grad-accum", type=positive_int, help="micro-steps per optimizer step")
    g.add_argument("--batch-warmup-steps", type=nonnegative_int, metavar="N",
                   help="batch-size warmup (ModernBERT's): the global batch grows from one micro-step (--batch-size / "
                        "--grad-accum rows over the ranks) to --batch-size over the first N steps, the micro-steps "
                        "of step s being 1 + (--grad-accum - 1) x s // N, the loss the mean over each step's own "
                        "rows; the lr's schedule stays by step (default 0: none; at most --steps, with --grad-accum "
                        "above 1)")
    g.add_argument("--batch-warmup-tokens", type=nonnegative_int, metavar="T",
                   help="the same warmup given in tokens: it ends at the first step by which the run has seen T "
                        "positions (rows x the rows' L, padding included, over every rank), the shortest warmup "
                        "that does; instead of --batch-warmup-steps")
    g.add_argument("--lr", type=positive_float, help="peak learning rate (google: 1e-4 for BERT-Base)")
    g.add_argument("--warmup-steps", type=nonnegative_int,
                   help="linear warmup steps (default: 1%% of --steps; on --resume, the resumed run's)")
    g.add_argument("--schedule", choices=tuple(KINDS),
                   help="the lr after warmup: " + "; ".join(f"{name}: {kind.what}" for name, kind in KINDS.items()))
    g.add_argument("--min-lr", type=nonnegative_float,
                   help="the lr a decay ends at, at most --lr (linear, cosine, wsd)")
    g.add_argument("--decay-steps", type=positive_int, metavar="N",
                   help="wsd: the decay phase is the last N steps")
    g.add_argument("--decay-fraction", type=fraction, metavar="F",
                   help=f"wsd: the decay phase is the last F of --steps, 0 < F <= 1 (default {WSD_DECAY_FRACTION:g} "
                        "without --decay-steps); a decay phase on its own from a stable run: --init-from RUN "
                        "--init-optimizer-state --warmup-steps 0 --decay-fraction 1")
    g.add_argument("--decay-shape", choices=tuple(DECAY_SHAPES), help="wsd: the decay's shape (default linear)")
    g.add_argument("--optimizer", choices=tuple(OPTIMIZERS),
                   help="; ".join(f"{name}: {kind.what}" for name, kind in OPTIMIZERS.items()))
    g.add_argument("--weight-decay", type=nonnegative_float,
                   help="not applied to LayerNorm weights and biases")
    g.add_argument("--clip-norm", type=positive_float, help="global gradient-norm clip")


def _train_run_flags(g) -> None:
    """`bertprep train`'s run group: the run directory, logging, evaluation, checkpoints and devices."""
    g.add_argument("--output", required=True, help="run directory")
    g.add_argument("--seed", type=int)
    g.add_argument("--log-every", type=positive_int)
    g.add_argument("--eval-every", type=nonnegative_int, help="steps between evaluations (0: none)")
    g.add_argument("--eval-batches", type=positive_int,
                   help="batches per evaluation and rank (default: the whole held-out set)")
    g.add_argument("--checkpoint-every", type=nonnegative_int,
                   help="steps between checkpoints (0: at the end only)")
    g.add_argument("--keep-checkpoints", type=positive_int)
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --output from its latest checkpoint, on the same --data (other shards "
                        "are refused: a new phase on them is a new run, --init-from), with the run's own value of "
                        "every flag not given. Given with another value,")   # plan.RESUME's, added by add_train
    g.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds a run (its log, events, checkpoints go)")
    g.add_argument("--stop-after", type=positive_int,
                   help="exit (with a checkpoint) after this many steps of this invocation, e.g. to fit a job's "
                        "time limit; the schedule still spans --steps")
    g.add_argument("--device", type=device_name, help="cpu | cuda | cuda:N (default: cuda if available)")
    g.add_argument("--dist-timeout-min", type=positive_float,
                   help="several ranks: minutes a rank waits in a collective before the run fails (a rank that died "
                        "or hangs ends every other within it, exit 1). Checkpoints are written in the background, "
                        f"so no rank waits for a save; the default {RunPlan.dist_timeout_min:g} covers the slowest "
                        "step, evaluation and the copy of a checkpoint's state off the device")


def train_plan(args: argparse.Namespace) -> TrainPlan:
    """The run's plan from `bertprep train`'s flags (`args.given`: the ones the command line gave, Parser's
    record_given); RunError where they cannot make a run: a new run's warmup longer than its steps, or a --batch-size
    that the ranks (torchrun's WORLD_SIZE) times --grad-accum do not divide (a resume's: the run checks them)."""
    from model.ranks import world_size   # torch, as the run

    plan = TrainPlan.from_flat(vars(args))   # its masking: MaskRecipe.from_json, as groups.mask_recipe reads mask's
    check_masking(plan)
    check_init_from(plan)
    if not plan.run.resume:   # a resume's schedule is the run's with the flags given: the run checks it
        plan.schedule.check(world_size())
    return plan


def check_masking(plan: TrainPlan) -> None:
    """The masking flags agree: the replacement split as `mask` checks it, and the two that only the trainer's own
    masking can follow (masked shards carry the masks they were made with)."""
    refusal = plan.data.masking.split_refusal()
    if refusal:
        raise RunError(refusal)
    if plan.data.dynamic_masking:
        return
    if plan.data.masked_lm_prob_end is not None:
        raise RunError(f"--masked-lm-prob-end {plan.data.masked_lm_prob_end:g} changes the rate of masks drawn as "
                       "the run trains: give --dynamic-masking and pairs (masked shards carry the masks they were "
                       "made with)")
    if plan.evaluation.eval_masked_lm_prob is not None:
        raise RunError(f"--eval-masked-lm-prob {plan.evaluation.eval_masked_lm_prob:g} masks held-out pairs as the "
                       "run evaluates: held-out masked shards carry the masks they were made with (give "
                       "--dynamic-masking and pairs, or make the validation set with --validation-masked-lm-prob)")


def check_init_from(plan: TrainPlan) -> None:
    """--init-from's flags agree: the two that only make sense with it, and a source outside --output (which
    --overwrite would clear). Whether the source is there is the run's to find: a resumed run does not read it."""
    model = plan.model
    if model.init_from is None:
        for flag, given in (("--init-optimizer-state", model.init_optimizer_state),
                            ("--max-position-embeddings", model.max_position_embeddings is not None)):
            if given:
                raise RunError(f"{flag} applies to a source's weights: give --init-from SOURCE (a new model's "
                               "positions are its --model config's)")
        return
    source, output = os.path.realpath(model.init_from), os.path.realpath(plan.run.output)
    if os.path.commonpath([source, output]) == output:
        raise RunError(f"--init-from {model.init_from} is inside --output {plan.run.output}: a new run needs a "
                       "directory of its own (--overwrite would delete its source)")


def parse_train(argv: list[str]) -> TrainPlan:
    """The plan of `bertprep train ARGV`, for a caller without the command line (the tests)."""
    p = flags.Parser(prog="bertprep train")
    add_train(p)
    return train_plan(p.parse_args(argv))


def resume_help(p: argparse.ArgumentParser) -> str:
    """--resume's help: plan.RESUME's kinds, each with the flags of `p` it holds."""
    by_kind, known = {}, {flag for action in p._actions for flag in action.option_strings}
    for name, kind in RESUME.items():
        if flag_of(name) in known and name != "resume":
            by_kind.setdefault(type(kind), []).append(flag_of(name))
    return " ".join(f"{', '.join(listed)} {kind.doc};" for kind, listed in by_kind.items()).rstrip(";") + "."


def run_train(args: argparse.Namespace) -> int:
    """`bertprep train`: trains; a problem with the flags, the run directory or the data is one line, exit 2; a run
    stopped by SIGINT or SIGTERM is one line saying where its checkpoint is, exit 128 + the signal (130, 143)."""
    from model import data, train   # torch
    from model.ranks import collective_failed, world_size
    from pipeline.commands import cli   # which finds this module through its command table
    from pipeline.formats.tfrecord import CorruptRecordError

    try:
        plan = train_plan(args)
        result = train.train(plan)
    except RuntimeError as e:
        if not collective_failed(e):
            raise
        # another rank died, raised or timed out: this one stops too, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"bertprep train: error: rank {os.environ.get('RANK', '?')}: a collective with the other ranks "
              f"failed ({first[:300]}): another rank stopped, or waited more than --dist-timeout-min "
              f"{args.dist_timeout_min:g}", file=sys.stderr)
        return 1
    except (RunError, data.ShardSpecError, data.BadRecordError, CorruptRecordError) as e:
        message = str(e).strip()
        if "Original Traceback" in message:  # raised in a DataLoader worker: its last line is the error itself,
            message = cli.one_line(e)       # less its class's module path
        # a bad record is this rank's own (ranks read different records): it says so; a refusal of the flags, the
        # run directory or the shards is every rank's alike: rank 0 alone prints it, and every rank exits 2
        if isinstance(e, (data.BadRecordError, CorruptRecordError)) and world_size() > 1:
            print(f"bertprep train: error: rank {os.environ.get('RANK', '?')}: {message}", file=sys.stderr)
        elif not flags.echo_rank():
            print(f"bertprep train: error: {message}", file=sys.stderr)
        return 2
    if result["interrupted"]:
        if result["master"]:
            print(interrupted(plan, result), file=sys.stderr)
        return 128 + result["interrupted"]
    if result["finished"] and result["master"]:
        print(f"bertprep train: {plan.run.output} is finished: its checkpoint "
              f"{os.path.basename(result['checkpoint'])} is at step {result['step']} of --steps {result['step']}; to "
              "train on, resume with a larger --steps (the decay is stretched to it)")
    return 0


def interrupted(plan: TrainPlan, result: dict) -> str:
    """The one line of a run a signal stopped: where its work is, and how to go on."""
    name = signal.Signals(result["interrupted"]).name
    if not result["steps_run"]:
        latest = f" (the latest: {result['checkpoint']})" if result["checkpoint"] else ""
        return (f"bertprep train: interrupted by {name} before its first step: nothing new trained, no checkpoint "
                f"written{latest}")
    again = "the same command" if plan.run.resume else "the same command and --resume"
    return (f"bertprep train: interrupted by {name} at step {result['step']}: saved {result['checkpoint']}; "
            f"resume with {again}")


# ---- export-hf -----------------------------------------------------------------------------------------------------

def add_export_hf(parser: argparse.ArgumentParser) -> None:
    """Adds the `bertprep export-hf` arguments to `parser`."""
    parser.add_argument("run_dir", help="a `bertprep train` --output directory")
    parser.add_argument("out_dir", help="where to write the HF model directory (weights, config and tokenizer)")
    parser.add_argument("--checkpoint", help="a checkpoint file to export instead of RUN_DIR's latest")
    parser.add_argument("--vocab", metavar="FILE",
                        help="the vocab.txt the run's shards were made with (default: the file their manifest names; "
                             "checked against its sha256)")
    parser.add_argument("--tokenizer", metavar="FILE",
                        help="instead of --vocab, where the shards were made with a tokenizer.json: that file "
                             "(default: the one their manifest names; checked against its sha256)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an OUT_DIR that holds files, replacing the ones export-hf writes")


def run_export_hf(args: argparse.Namespace) -> int:
    """`bertprep export-hf`: exports --checkpoint or RUN_DIR's latest; what it refuses is one line, exit 2."""
    from model import export_hf   # torch, safetensors, tokenizers

    try:
        path = export_hf.checkpoint_to_export(args.run_dir, args.checkpoint)
        done = export_hf.export(path, args.out_dir, args.vocab, args.overwrite, args.tokenizer)
    except export_hf.ExportError as e:
        print(f"bertprep export-hf: error: {e}", file=sys.stderr)
        return 2
    casing = "uncased" if done.vocab.lowercase else "cased"
    casing += " (decided from the vocab: the manifest does not say)" if done.vocab.inferred else ""
    print(f"exported {path} -> {args.out_dir}: {', '.join(done.files)} ({done.architecture}; tokenizer {casing}, "
          f"model_max_length {done.model_max_length}, {done.vocab.kind} {done.vocab.path})")
    print(f'load it with transformers.pipeline("fill-mask", model={args.out_dir!r}), '
          f"{done.architecture}.from_pretrained({args.out_dir!r}) or AutoTokenizer.from_pretrained({args.out_dir!r})")
    return 0


# ---- plot ----------------------------------------------------------------------------------------------------------

def add_plot(parser: argparse.ArgumentParser) -> None:
    """Adds the `bertprep plot` arguments to `parser`."""
    parser.add_argument("run_dir", help="a `bertprep train` --output directory")
    parser.add_argument("--out", help="PNG path (default: RUN_DIR/curves.png)")


def run_plot(args: argparse.Namespace) -> int:
    """`bertprep plot`: draws RUN_DIR's curves; a missing or empty log is one line, exit 2."""
    try:
        records = plot.read_log(args.run_dir)
    except FileNotFoundError as e:
        print(f"bertprep plot: error: {e}", file=sys.stderr)
        return 2
    if not records:
        print(f"bertprep plot: error: {args.run_dir}/log.jsonl is empty", file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.run_dir, "curves.png")
    plot.plot(records, out, title=os.path.basename(os.path.normpath(args.run_dir)))
    print(f"wrote {out}")
    return 0
