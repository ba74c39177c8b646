"""The options' checks made before any work, and the library configurations built from them (decoding for
``generate``, the evaluation protocol for ``evaluate``)."""

from __future__ import annotations

import argparse

from trace_core.checks import check_int, check_real
from trace_core.cli._support import CLIError
from trace_core.evaluation.run import EvaluationConfig
from trace_core.traces.trace import DecodingConfig

__all__ = ["check_options", "decoding", "evaluation_config"]


def _check_model_choice(args: argparse.Namespace) -> None:
    """Exactly one of --model and --server; --server needs --server-model and cannot run beam search."""
    if not hasattr(args, "server"):
        return
    if bool(args.model) == bool(args.server):
        raise CLIError("give --model (a local model; --model smollm2: the dashboard's default model) or --server URL "
                       "with --server-model NAME (a model server), not both or neither")
    if args.server and not args.server_model:
        raise CLIError("--server needs --server-model: the name the server serves the model under")
    if args.server and args.beams:
        raise CLIError("--beams needs a local model (--model): model servers do not return beam scores")
    if args.server and args.server_api == "chat" and args.chat_template is False and hasattr(args, "max_new_tokens"):
        raise CLIError("--no-chat-template: --server-api chat sends each prompt to the server's chat endpoint, which "
                       "always applies the server's chat template; use --server-api completions to send the prompts "
                       "as they are")
    if not args.server:
        given = [o for o, v in (("--server-model", args.server_model), ("--server-tokenizer", args.server_tokenizer),
                                ("--full-distribution", args.full_distribution),
                                ("--server-api", args.server_api != "completions")) if v]
        if given:
            raise CLIError(f"{', '.join(given)}: only with --server")


def decoding(args: argparse.Namespace, *, chat_template: bool | None = None):
    """The :class:`trace_core.traces.trace.DecodingConfig` that ``generate``'s options ask for, with ``chat_template``
    (default: ``args.chat_template``, which must be resolved for the model by then:
    :func:`~trace_core.cli.common.resolve_chat_template`)."""
    return DecodingConfig(max_new_tokens=args.max_new_tokens, do_sample=args.sample, temperature=args.temperature,
                          top_k=args.top_k, top_p=args.top_p, seed=args.seed, n_alternatives=args.alternatives,
                          chat_template=args.chat_template if chat_template is None else chat_template)


def evaluation_config(args: argparse.Namespace):
    """The :class:`trace_core.evaluation.run.EvaluationConfig` that ``evaluate``'s options ask for."""
    return EvaluationConfig(n_splits=args.splits, calibration_fraction=args.calibration_fraction,
                            stratified=args.stratified, seed=args.seed, n_bins=args.bins,
                            scalar_calibrator=args.calibrator)


def check_options(args: argparse.Namespace) -> None:
    """Every numeric option, checked by the library's own rules before a file is read or a model loaded, so that a
    bad value never costs a run (the messages name keyword arguments; :func:`cli_words` turns them into options)."""
    _check_model_choice(args)
    if getattr(args, "server", None):
        check_int(args.concurrency, "concurrency", minimum=1, maximum=1024)
        check_int(args.retries, "max_retries", minimum=0, maximum=20)
        check_real(args.timeout, "timeout", minimum=0, maximum=86_400, low_open=True)
    if hasattr(args, "max_new_tokens"):
        decoding(args, chat_template=False)  # the numbers; the template is resolved once the model is known
    if hasattr(args, "splits"):
        evaluation_config(args)
    for option, keyword, minimum, maximum in (("batch_size", "batch_size", 1, 100_000),
                                              ("alternatives", "n_alternatives", 0, 1_000)):
        if hasattr(args, option):
            check_int(getattr(args, option), keyword, minimum=minimum, maximum=maximum)
    if getattr(args, "beams", 0):  # 0 is off; beams need at least 2
        check_int(args.beams, "num_beams", minimum=2, maximum=64)
    if hasattr(args, "C"):
        check_real(args.C, "C", minimum=0, low_open=True)
    if hasattr(args, "tolerance"):
        check_real(args.tolerance, "tolerance", minimum=0.0, finite=False)
    if getattr(args, "threshold", None) is not None:
        check_real(args.threshold, "threshold", minimum=0, maximum=1)
    if getattr(args, "coverage", None) is not None:
        check_real(args.coverage, "coverage", minimum=0, maximum=1, low_open=True)
    if getattr(args, "target_risk", None) is not None:
        check_real(args.target_risk, "target_risk", minimum=0, maximum=1)
    _check_guarantee_options(args)


def _check_guarantee_options(args: argparse.Namespace) -> None:
    """``--max-risk`` with its ``--delta``, ``--risk-data`` and ``--group-by``: each only with the others it needs."""
    if getattr(args, "max_risk", None) is not None:
        check_real(args.max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
        check_real(args.delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
        if not args.risk_data:
            raise CLIError("--max-risk needs --risk-data: labeled answers, not those the calibrator was fitted on, "
                           "to choose the guaranteed threshold")
    elif getattr(args, "risk_data", None):
        raise CLIError("--risk-data is for --max-risk (a guaranteed error rate); give --max-risk ALPHA too")
    if getattr(args, "guarantee_by", None) and getattr(args, "max_risk", None) is None:
        raise CLIError("--group-by is for --max-risk (a guaranteed error rate per group); give --max-risk ALPHA too")
