"""The study's inputs: the traffic loaded with the runtime's own limits (its text through the model's tokenizer,
in a child process), a window selected, split by time into the search and the held-out windows, and the rates a
scale reads in. A window too short to hold a rate for `replay.min_window_s` is refused with its numbers.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

from runtime import engine_limits, has_tokenizer, model_info
from tuner.config import AppConfig, LongPrompts, SloConfig
from tuner.measure.measure import highest_scale
from tuner.measure.metrics import allowed_failures
from tuner.measure.plan import Rates
from tuner.model_tokenizer import ModelTokenizer
from tuner.traffic import (
    GROUPED_SHARE,
    ReplayWindow,
    TrafficError,
    TrafficLoad,
    arrival_groups,
    arrival_rate,
    load_traffic,
    peak_rate,
    select,
    split_windows,
)

__all__ = ["StudyInputs", "grouped_arrivals", "study_inputs"]

log = logging.getLogger("pagetune")


class StudyInputs(NamedTuple):
    traffic: TrafficLoad
    search: ReplayWindow  # the trials' window, and the finalists' selection
    held_out: ReplayWindow | None  # the proof's; None: the proof replays the search window in fresh rounds
    rates: Rates  # how a rate scale of the search window reads


def study_inputs(app: AppConfig) -> StudyInputs:
    """Raises TrafficError (a bad or too short trace), TunerConfigError and ConfigError (the model)."""
    traffic = _traffic(app)
    return StudyInputs(traffic, *_windows(app, traffic))


def _traffic(app: AppConfig) -> TrafficLoad:
    info = model_info(app.runtime.model.name)
    limit = engine_limits(app.runtime, info).max_model_len  # the runtime's rule, every cap
    with ModelTokenizer(app.runtime.model.name) as tok:  # its process starts only on the traffic's first text
        text = {"tokenizer": tok.encode, "chat_tokenizer": tok.chat} if has_tokenizer(app.runtime.model.name) else {}
        traffic = load_traffic(app.traffic, fmt=app.traffic_format.value, on_error=app.replay.on_error.value,
                               vocab_size=info.vocab_size, max_model_len=limit,
                               long_prompts=app.replay.long_prompts.value, **text)
    if tok.used:
        log.info("traffic text: tokenized with %s's own tokenizer and chat template", app.runtime.model.name)
    if traffic.rejected_share > app.replay.max_rejected_share:
        raise TrafficError(
            f"{app.traffic}: {traffic.rejected_too_long} of {traffic.rejected_too_long + len(traffic.requests)} "
            f"requests ({traffic.rejected_share:.1%}) need more than max_model_len {limit} tokens (prompt + output) "
            f"and would be rejected, above replay.max_rejected_share {app.replay.max_rejected_share:.0%}: "
            f"{_remedy(app.replay.long_prompts)}raise runtime.scheduler.max_model_len (the model allows "
            f"{info.max_position_embeddings})")
    return traffic


def _remedy(long_prompts: LongPrompts) -> str:
    """What else would fit them: truncation, unless it is on already (then their outputs alone are too long)."""
    if long_prompts is LongPrompts.truncate:
        return "their outputs alone reach it, even with prompts truncated: "
    return "pass replay.long_prompts=truncate, or "


def _windows(app: AppConfig, traffic: TrafficLoad) -> tuple[ReplayWindow, ReplayWindow | None, Rates]:
    requests = select(traffic.requests, start_s=app.replay.start_s, duration_s=app.replay.duration_s,
                      max_requests=app.replay.max_requests, sample=app.replay.sample, seed=app.replay.seed,
                      time_scale=app.replay.time_scale)
    held = app.validation.holdout_fraction > 0
    _require_duration(app, "selection", requests, app.replay.min_window_s * (2 if held else 1))
    split = split_windows(requests, app.validation.holdout_fraction, app.replay.min_window_s)
    search = ReplayWindow("search", split.search, arrival_rate(split.search))
    if not math.isfinite(search.rate_rps):
        raise TrafficError(f"{app.traffic}: the {len(split.search)} requests of the search window arrive at once: "
                           "there is no arrival rate to scale; replay a longer window (replay.duration_s, "
                           "replay.max_requests)")
    held_out = ReplayWindow("validation", split.validation, arrival_rate(split.validation))
    if not math.isfinite(held_out.rate_rps):  # none, one, or all at once: the proof replays the search window
        held_out = None
    rates = Rates(search.rate_rps, search.rate_rps / app.replay.time_scale, peak_rate(traffic.requests))
    for window in (search, held_out):
        _warn_if_no_miss_allowed(window, app.slo)
    log.info("windows: %s", "; ".join(_reach(app, w) for w in (search, held_out) if w is not None))
    return search, held_out, rates


def _reach(app: AppConfig, window: ReplayWindow) -> str:
    """What a window can show: the fastest rate at which it still spans replay.min_window_s."""
    name = "held-out" if window.key == "validation" else window.key
    top = window.rate_rps * highest_scale(window.span_s, app.replay.min_window_s)
    return (f"{name} {len(window.requests)} requests over {window.span_s:.4g} s ({window.rate_rps:.4g} req/s), "
            f"capacities up to {top:.4g} req/s (held for replay.min_window_s={app.replay.min_window_s:g} s)")


def _require_duration(app: AppConfig, name: str, requests: tuple, needed_s: float) -> None:
    """A window shorter than replay.min_window_s at its own rate cannot show a capacity even at that rate."""
    span = requests[-1].arrival_s - requests[0].arrival_s if requests else 0.0
    if span >= needed_s:
        return
    rate, minimum = arrival_rate(requests), app.replay.min_window_s
    top = (len(requests) - 1) / minimum if minimum > 0 else math.inf
    raise TrafficError(
        f"{app.traffic}: the {name} spans {span:.4g} s ({len(requests)} requests, {rate:.4g} req/s), under the "
        f"{needed_s:g} s it needs: a capacity is a rate held for replay.min_window_s={minimum:g} s, so a window of "
        f"{len(requests)} requests shows none above {top:.4g} req/s, and the held-out window takes the last "
        "replay.min_window_s seconds at least. Replay a longer window (replay.duration_s, replay.max_requests), "
        "or lower replay.min_window_s")


def _warn_if_no_miss_allowed(window: ReplayWindow | None, slo: SloConfig) -> None:
    """Below 1 / (1 - attainment) requests, one miss fails a replay: the capacity is its worst request's."""
    if window is None or slo.attainment >= 1.0 or allowed_failures(len(window.requests), slo) > 0:
        return
    needed = math.ceil(1.0 / (1.0 - slo.attainment) - 1e-9)
    log.warning("the %s window has %d requests: at slo.attainment %g not one may miss, so its capacity is set by "
                "its slowest request and varies from replay to replay; %d or more requests let one miss (a longer "
                "window: replay.duration_s, replay.max_requests, validation.holdout_fraction)", window.key,
                len(window.requests), slo.attainment, needed)


def grouped_arrivals(window: ReplayWindow) -> str:
    """The search window's arrivals in groups at one instant, when they are a large share; else ""."""
    groups = arrival_groups(window.requests)
    return groups.line() if groups.share >= GROUPED_SHARE else ""
