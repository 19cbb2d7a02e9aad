"""A study is bound to what it measures: another traffic or window is another study, never a resume."""

from __future__ import annotations

import optuna
import pytest

from tuner.config import ResumeMode, load_app_config
from tuner.search.identity import FINGERPRINT_ATTR, FORCED_ATTR, StudyMismatch, study_identity


@pytest.fixture
def app(compose, tmp_path):
    traffic = tmp_path / "logs.jsonl"
    traffic.write_text("{}\n")
    return lambda *overrides: load_app_config(compose(f"traffic={traffic}", *overrides))


def test_default_name_is_the_traffic_stem_and_the_fingerprint(app):
    identity = study_identity(app(), "a" * 64)
    assert identity.name == f"logs-{identity.fingerprint[:8]}"
    assert study_identity(app(), "a" * 64) == identity  # deterministic
    other = [study_identity(app(), "b" * 64), study_identity(app("replay.max_requests=10"), "a" * 64),
             study_identity(app("slo.ttft_s=1.0"), "a" * 64), study_identity(app("model=llama3-8b"), "a" * 64),
             study_identity(app("search.params.max_num_seqs.high=64"), "a" * 64),
             study_identity(app("baseline=runtime"), "a" * 64)]
    assert len({i.fingerprint for i in [identity, *other]}) == 7
    assert study_identity(app("tuner.study_name=mine"), "a" * 64).name == "mine"


def test_a_named_study_of_other_traffic_is_not_resumed(app):
    study = optuna.create_study()
    study_identity(app("tuner.study_name=s"), "a" * 64).bind(study, ResumeMode.auto)
    again = study_identity(app("tuner.study_name=s"), "a" * 64)
    again.bind(study, ResumeMode.auto)  # the same: fine
    other = study_identity(app("tuner.study_name=s", "replay.time_scale=2"), "b" * 64)
    with pytest.raises(StudyMismatch) as err:
        other.bind(study, ResumeMode.auto)
    assert str(err.value) == ("tuner.study_name: study 's' was made with other settings (traffic_sha256, window "
                              "differ); pick another tuner.study_name (or leave it unset), or resume it anyway with "
                              "tuner.resume=force")
    other.bind(study, ResumeMode.force)
    assert study.user_attrs[FORCED_ATTR] == [{"fingerprint": other.fingerprint,
                                              "differ": ["traffic_sha256", "window"]}]
    assert study.user_attrs[FINGERPRINT_ATTR] == again.fingerprint  # the study keeps its own
