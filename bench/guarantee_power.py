"""Validity and power of the flagging guarantee (:mod:`trace_core.flagging.guarantee`) over redrawn calibration sets.

    python -m bench.guarantee_power [--draws N] [--quick] [--populations NAME ...] [--n N ...] [--alpha A ...]
                                    [--delta D ...] [--jobs J]

Each *population* is a large pool of (P(correct), label) pairs; a calibration set is ``n`` answers drawn from it with
replacement (so it is exactly a sample from the pool), and the pool gives the truth: the selective risk and the
coverage of every threshold of :data:`trace_core.flagging.guarantee.GRID`, and the *oracle* coverage (the largest
coverage of a grid threshold whose risk is at most alpha). Populations:

``spike``
    The synthetic ``spike`` traces (:func:`trace_core.synthetic_traces`, mean length 64) with 4% of the right
    answers labeled wrong although their traces look right (confident mistakes: about 3% of the most confident
    answers are wrong, and 13% of the 30% most confident); TRACE+ fitted on 2,000 other answers gives P(correct)
    on a pool of 200,000.
``spike-clean``
    The same without confident mistakes.
``calibrated`` / ``overconfident``
    P(correct) uniform on (0, 1); an answer is right with probability p (or p ** 2).
``confident-top``
    Calibrated, except that the 3% most confident answers are right only 70% of the time (the risk is not monotone).
``rare-errors`` / ``rare-right``
    Calibrated with P(correct) ~ Beta(20, 1) (5% wrong) or Beta(1, 4) (80% wrong, like a small model's answers).
``flat``
    P(correct) says nothing: 20.5% of the answers are wrong at every threshold (at alpha = 0.2 every certificate is
    a violation).
``real``
    SmolLM2-135M-Instruct's bundled test answers (``assets/datasets/real_test.csv``) scored by TRACE+ fitted on its
    validation answers; drawn at their own size only (a bootstrap: the 458 answers are the population).

Procedures: ``fallback`` is the shipped :func:`trace_core.flagging.guarantee.guaranteed_threshold`; ``fixed sequence``
is one fixed sequence at level delta from the strictest threshold keeping ``needed(alpha, delta)`` answers, stopping at
its first failure; ``SGR`` is the binary search of Geifman and El-Yaniv (2017) over the grid, each of its ``ceil(log2
m)`` tests at ``delta / ceil(log2 m)``; ``Bonferroni starts`` runs a fixed sequence from each of the shipped starts at
``delta / K`` each (what the fallback improves on: it hands a passed start's level on).

Columns: *violations* is the share of draws whose certified threshold has a true risk above alpha (a draw that
certifies nothing keeps nothing and cannot violate), with its standard error; *ok* says it is at most delta plus 3
standard errors; *certified* is the share of draws with a threshold; *coverage/oracle* is the median, over the
certified draws, of the threshold's true coverage over the oracle's; *>=80% oracle* is the share of all draws whose
threshold reaches 80% of the oracle's coverage.
"""

from __future__ import annotations

import argparse
import math
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trace_core.flagging.guarantee import GRID, fallback_starts, guaranteed_threshold, needed

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "assets" / "datasets"


@dataclass(frozen=True)
class Population:
    """A pool of answers' P(correct) and 0/1 labels; ``own_size``: draw only calibration sets of the pool's size."""

    name: str
    p: np.ndarray
    y: np.ndarray
    own_size: bool = False


@dataclass(frozen=True)
class Truth:
    """A population's selective risk and coverage at each grid threshold."""

    risk: np.ndarray
    coverage: np.ndarray

    def oracle(self, alpha: float) -> float:
        ok = self.risk <= alpha + 1e-12
        return float(self.coverage[ok].max()) if ok.any() else 0.0


@dataclass(frozen=True)
class Result:
    population: str
    n: int
    alpha: float
    delta: float
    procedure: str
    draws: int
    violations: int
    certified: int
    median_ratio: float
    reached: int

    @property
    def violation_rate(self) -> float:
        return self.violations / self.draws

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.delta * (1 - self.delta) / self.draws)

    @property
    def ok(self) -> bool:
        return self.violation_rate <= self.delta + 3 * self.standard_error


# --- populations ---------------------------------------------------------------------------------------------------

def spike_population(size: int = 200_000, *, confident: float = 0.04, fit: int = 2_000,
                     name: str | None = None) -> Population:
    """Synthetic spike traces scored by TRACE+ fitted on ``fit`` other answers; ``confident``: the share of right
    answers labeled wrong although their traces look right (confident mistakes)."""
    from trace_core import TracePlus, synthetic_traces
    from trace_core.methods.features import feature_matrix_from_arrays

    def draw(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        surprisal, entropy, y = synthetic_traces(n, kind="spike", mean_length=64, seed=seed)
        flip = np.random.default_rng(seed + 1_000).random(n) < confident
        return feature_matrix_from_arrays(surprisal, entropy), np.where(flip, 0, y)

    features, labels = draw(fit, 1)
    model = TracePlus().fit(features, labels)
    features, labels = draw(size, 2)
    default = "spike" if confident else "spike-clean"
    return Population(name or default, model.predict_proba(features), labels.astype(np.int64))


def drawn_population(name: str, size: int = 1_000_000, seed: int = 5) -> Population:
    """The populations whose P(correct) and P(right | p) are given in closed form (see the module docstring)."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[Callable[[], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
        "calibrated": (lambda: rng.random(size), lambda p: p),
        "overconfident": (lambda: rng.random(size), lambda p: p ** 2),
        "confident-top": (lambda: rng.random(size), lambda p: np.where(p > 0.97, 0.7, p)),
        "rare-errors": (lambda: rng.beta(20, 1, size), lambda p: p),
        "rare-right": (lambda: rng.beta(1, 4, size), lambda p: p),
        "flat": (lambda: rng.random(size), lambda p: np.full_like(p, 0.795)),
    }
    draw_p, right = shapes[name]
    p = draw_p()
    return Population(name, p, (rng.random(size) < right(p)).astype(np.int64))


def real_population() -> Population:
    """The bundled real test answers scored by TRACE+ fitted on the bundled real validation answers."""
    from trace_core import TracePlus, read_dataset

    fit, test = read_dataset(DATA / "real_validation.csv"), read_dataset(DATA / "real_test.csv")
    model = TracePlus().fit(list(fit.traces), fit.labels)
    return Population("real", model.predict_proba(list(test.traces)), np.asarray(test.labels, dtype=np.int64),
                      own_size=True)


POPULATIONS: dict[str, Callable[[], Population]] = {
    "spike": spike_population,
    "spike-clean": lambda: spike_population(confident=0.0),
    **{name: (lambda name=name: drawn_population(name)) for name in
       ("calibrated", "overconfident", "confident-top", "rare-errors", "rare-right", "flat")},
    "real": real_population,
}


# --- the procedures: (probabilities, labels, grid counts, alpha, delta) -> certified grid index or None -------------

def grid_counts(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many answers each grid threshold keeps, and the wrong ones among them."""
    order = np.argsort(-p, kind="stable")
    wrong = np.cumsum(1 - y[order])
    kept = np.searchsorted(-p[order], -GRID, side="right")
    return kept, np.where(kept > 0, wrong[np.maximum(kept - 1, 0)], 0)


def _p_values(kept: np.ndarray, errors: np.ndarray, alpha: float) -> np.ndarray:
    from scipy.stats import binom

    return binom.cdf(errors, kept, alpha)


def _same(kept: np.ndarray, index: int) -> int:
    """The strictest grid index keeping the same answers (what the shipped method returns too)."""
    return int(np.searchsorted(kept, kept[index], side="left"))


def _run(p_values: np.ndarray, start: int, level: float) -> int | None:
    """A fixed sequence from ``start`` at ``level``: the last index before its first failure, or None."""
    passed = p_values[start:] <= level
    run = int(np.argmin(passed)) if not passed.all() else passed.shape[0]
    return start + run - 1 if run else None


def shipped(p: np.ndarray, y: np.ndarray, counts: tuple, alpha: float, delta: float) -> int | None:
    threshold = guaranteed_threshold(p, y, max_risk=alpha, delta=delta).threshold
    return None if threshold is None else int(round((1.0 - threshold) * 1000))


def fixed_sequence(p: np.ndarray, y: np.ndarray, counts: tuple, alpha: float, delta: float) -> int | None:
    kept, errors = counts
    start = int(np.searchsorted(kept, needed(alpha, delta), side="left"))
    if start == kept.shape[0]:
        return None
    last = _run(_p_values(kept, errors, alpha), start, delta)
    return None if last is None else _same(kept, last)


def binary_search(p: np.ndarray, y: np.ndarray, counts: tuple, alpha: float, delta: float) -> int | None:
    kept, errors = counts
    low, high = int(np.searchsorted(kept, 1, side="left")), kept.shape[0] - 1
    level = delta / max(1, math.ceil(math.log2(high - low + 1)))
    p_values, best = _p_values(kept, errors, alpha), None
    while low <= high:
        middle = (low + high) // 2
        if p_values[middle] <= level:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return None if best is None else _same(kept, best)


def bonferroni_starts(p: np.ndarray, y: np.ndarray, counts: tuple, alpha: float, delta: float) -> int | None:
    kept, errors = counts
    starts = fallback_starts(int(p.shape[0]), alpha, delta)
    p_values = _p_values(kept, errors, alpha)
    runs = [_run(p_values, int(np.searchsorted(kept, c, side="left")), delta / max(len(starts), 1)) for c in starts]
    passed = [r for r in runs if r is not None]
    return _same(kept, max(passed)) if passed else None


PROCEDURES: dict[str, Callable[..., int | None]] = {
    "fallback": shipped, "fixed sequence": fixed_sequence, "SGR": binary_search, "Bonferroni starts": bonferroni_starts,
}


# --- the simulation ------------------------------------------------------------------------------------------------

def truth(population: Population) -> Truth:
    kept, errors = grid_counts(population.p, population.y)
    size = population.p.shape[0]
    return Truth(np.where(kept > 0, errors / np.maximum(kept, 1), 0.0), kept / size)


def simulate(population: Population, n: int, alpha: float, delta: float, *, draws: int = 1_000, seed: int = 0,
             procedures: Sequence[str] = tuple(PROCEDURES), known: Truth | None = None) -> list[Result]:
    """``draws`` calibration sets of ``n`` answers from ``population``; each procedure's results against the truth."""
    known = known or truth(population)
    oracle = known.oracle(alpha)
    rng = np.random.default_rng(seed)
    found: dict[str, list[int]] = {name: [] for name in procedures}
    for _ in range(draws):
        pick = rng.integers(0, population.p.shape[0], n)
        p, y = population.p[pick], population.y[pick]
        counts = grid_counts(p, y)
        for name in procedures:
            index = PROCEDURES[name](p, y, counts, alpha, delta)
            if index is not None:
                found[name].append(index)
    return [_result(population.name, n, alpha, delta, name, draws, np.asarray(found[name], dtype=np.int64), known,
                    oracle) for name in procedures]


def _result(population: str, n: int, alpha: float, delta: float, name: str, draws: int, indices: np.ndarray,
            known: Truth, oracle: float) -> Result:
    violations = int((known.risk[indices] > alpha + 1e-12).sum())
    ratios = known.coverage[indices] / oracle if oracle > 0 else np.full(indices.shape[0], np.nan)
    median = float(np.median(ratios)) if indices.size and oracle > 0 else float("nan")  # "-" in the table
    return Result(population, n, alpha, delta, name, draws, violations, int(indices.size), median,
                  int((ratios >= 0.8).sum()) if oracle > 0 else 0)


def table(results: Sequence[Result]) -> str:
    lines = ["| population | n | alpha | delta | procedure | violations ± SE | ok | certified | coverage/oracle "
             "(median) | >=80% oracle |", "|---|---:|---:|---:|---|---:|---|---:|---:|---:|"]
    for r in results:
        median = "-" if math.isnan(r.median_ratio) else f"{r.median_ratio:.2f}"
        lines.append(f"| {r.population} | {r.n:,} | {r.alpha:g} | {r.delta:g} | {r.procedure} | "
                     f"{r.violation_rate:.3f} ± {r.standard_error:.3f} | {'yes' if r.ok else 'NO'} | "
                     f"{r.certified / r.draws:.3f} | {median} | {r.reached / r.draws:.3f} |")
    return "\n".join(lines)


def _setting(job: tuple[str, int, float, float, int]) -> list[Result]:
    name, n, alpha, delta, draws = job
    population = _loaded(name)
    return simulate(population, population.p.shape[0] if population.own_size else n, alpha, delta, draws=draws,
                    seed=zlib.crc32(repr((name, n, alpha, delta)).encode()), known=_truths[name])


_pools: dict[str, Population] = {}
_truths: dict[str, Truth] = {}


def _loaded(name: str) -> Population:
    if name not in _pools:
        _pools[name] = POPULATIONS[name]()
        _truths[name] = truth(_pools[name])
    return _pools[name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.guarantee_power", description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1_000, help="calibration sets drawn per setting")
    parser.add_argument("--populations", nargs="+", choices=list(POPULATIONS), default=list(POPULATIONS))
    parser.add_argument("--n", nargs="+", type=int, default=[200, 1_500, 20_000], help="calibration set sizes")
    parser.add_argument("--alpha", nargs="+", type=float, default=[0.05, 0.1, 0.2, 0.3])
    parser.add_argument("--delta", nargs="+", type=float, default=[0.05, 0.1])
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--quick", action="store_true",
                        help="only the issue's setting: spike, n = 1,500, alpha = 0.2, delta = 0.1")
    args = parser.parse_args(argv)
    if args.quick:
        args.populations, args.n, args.alpha, args.delta = ["spike"], [1_500], [0.2], [0.1]
    jobs = [(name, n, alpha, delta, args.draws) for name in args.populations
            for n in (args.n if name != "real" else args.n[:1]) for alpha in args.alpha for delta in args.delta]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = [r for rows in pool.map(_setting, jobs) for r in rows]
    else:
        results = [r for job in jobs for r in _setting(job)]
    print(table(results))
    bad = [r for r in results if not r.ok and r.procedure == "fallback"]
    print(f"\nfallback: violations within delta + 3 SE in {len(results) // len(PROCEDURES) - len(bad)} of "
          f"{len(results) // len(PROCEDURES)} settings")


if __name__ == "__main__":
    main()
