"""Flag & export's guaranteed mode: the labeled answers that choose the threshold (a file of answers the calibrator was
not fitted on), their P(correct) under the active calibrator, and the guarantee Learn-then-Test certifies on them
(:mod:`trace_core.flagging.guarantee`)."""

from __future__ import annotations

from pathlib import PurePath

import numpy as np
import streamlit as st

from trace_core.calibration.calibrators import probability_correct
from trace_core.flagging.guarantee import RiskGuarantee, guaranteed_threshold, repeated_prompts_note

from . import state
from .drift import drift_note, drift_result
from .inputs import pick_dataset_file, read_labeled
from .keys import digest
from .recording import dataset_traces, record_panel
from .text import md_literal, sentence

#: The bundled datasets' other split, offered first for the guarantee when the calibrator was fitted on one.
OTHER_SPLIT = {"demo_test": "demo_validation", "demo_validation": "demo_test", "real_test": "real_validation",
               "real_validation": "real_test"}


def labeled_for_guarantee(active: state.ActiveCalibrator) -> tuple[np.ndarray, np.ndarray, state.Answers] | None:
    """The P(correct) and labels of the labeled answers chosen for the guarantee, and the answers; None, with the
    reason on the page, until there are such answers (with traces, and not those the calibrator was fitted on)."""
    st.caption("The threshold is chosen on labeled answers drawn like the ones you flag, that the calibrator was "
               "**not** fitted on (for example the other half of your labeled data).")
    handed = state.calibrated_data()
    other = OTHER_SPLIT.get(PurePath(handed.name).stem) if handed is not None else None
    picked = pick_dataset_file("risk", prefer=other)  # a bundled split was calibrated on: its other split first
    if picked is None:
        return None
    read = read_labeled(picked, matcher_key="risk_matcher")
    if read is None:
        return None
    dataset, key = read
    lm = state.model()
    rows = dataset_traces(dataset, key, lm)
    missing = rows.usable.missing_message()  # None exactly when no row misses its trace
    if missing is not None:
        st.warning(sentence(missing))
        if lm is not None:
            record_panel(lm, rows, key="risk_record")
        return None
    problem = rows.usable.nothing_left_message()
    if problem:
        st.error(sentence(problem))
        return None
    data = rows.hand_off(picked.name)
    if active.fitted_on is not None and active.fitted_on == data.key:
        st.error("The calibrator was fitted on these answers: its probabilities flatter them, so they cannot "
                 "choose a guaranteed threshold. Choose labeled answers it was not fitted on.")
        return None
    try:
        probability = state.risk_scored(digest(data.key, active.key),
                                        lambda: probability_correct(active.model, data.traces))
    except ValueError as exc:  # e.g. a score that needs entropy, on traces without
        st.error(md_literal(f"The calibrator cannot score these answers: {exc}"))
        return None
    return probability, np.asarray(data.labels), data


def guarantee_choice(active: state.ActiveCalibrator, new: state.Answers | None = None) -> RiskGuarantee | None:
    """The settings of the guarantee (alpha, delta), the labeled answers, and the guarantee it gives, stated on the
    page with the drift check of the ``new`` answers against the labeled ones (the guarantee assumes they are drawn
    alike); None (with the reason) until there are labeled answers to choose with. A guarantee that certifies no
    threshold is returned too, with a warning naming the confident wrong answers that stop it (by their rows) and
    the labeled answers it would need: the page then flags every answer (keeping none is the only choice
    guaranteed)."""
    cols = st.columns(2)
    max_risk = cols[0].slider("Largest error rate among the answers kept (α)", 0.01, 0.5, 0.1, 0.01,
                              key="flag_max_risk")
    delta = cols[1].select_slider("Chance the guarantee fails (δ)", [0.01, 0.02, 0.05, 0.1, 0.2], value=0.1,
                                  key="flag_delta",
                                  help="Over the draw of the labeled answers: about this share of such sets would "
                                       "give a threshold that lets more errors through than α.")
    labeled = labeled_for_guarantee(active)
    if labeled is None:
        return None
    guarantee = guaranteed_threshold(labeled[0], labeled[1], max_risk=float(max_risk), delta=float(delta))
    risk = labeled[2]
    repeated = repeated_prompts_note(risk.frame["prompt"]) if "prompt" in risk.frame.columns else None
    if repeated:
        st.warning(md_literal(sentence(repeated)))
    if guarantee.threshold is None:
        st.warning(md_literal(guarantee.sentence(risk.frame[risk.row_column].tolist())))
    else:
        st.success(md_literal(guarantee.sentence()))
    if new is not None:
        drift_note(drift_result(active.model, new.traces, key=(new.key, risk.key, active.key),
                                reference=risk.traces))
    return guarantee
