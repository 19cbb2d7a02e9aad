"""Credentials in storage and tracking URLs are masked; everything else is left exactly as it was."""

from __future__ import annotations

import pytest

from tuner.redact import mask_text, mask_url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql+psycopg://tuner:s3cret@db:5432/optuna", "postgresql+psycopg://tuner:***@db:5432/optuna"),
        ("postgresql://tuner:p@ss@db/optuna", "postgresql://tuner:***@db/optuna"),  # unescaped "@"
        ("https://alice:tok3n@mlflow.example.com/prefix", "https://alice:***@mlflow.example.com/prefix"),
        ("http://u:@host:5000", "http://u:***@host:5000"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("http://[::1]:5000/a@b", "http://[::1]:5000/a@b"),
        ("postgresql://postgres@localhost/optuna", "postgresql://postgres@localhost/optuna"),
        ("sqlite:///mlflow.db", "sqlite:///mlflow.db"),
        ("sqlite:////tmp/odd:name@x.db", "sqlite:////tmp/odd:name@x.db"),
        ("file:///tmp/mlruns", "file:///tmp/mlruns"),
        ("mysql://u:pw@h/db?password=again&sslmode=require", "mysql://u:***@h/db?password=***&sslmode=require"),
        ("https://h/api?token=abc&Token=def&x=1", "https://h/api?token=***&Token=***&x=1"),
        ("https://h/api?api_key=k#frag", "https://h/api?api_key=***#frag"),
        ("https://h/api?notatoken=keep", "https://h/api?notatoken=keep"),
        ("", ""),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


def test_mask_text_masks_every_url_and_dsn_pair_in_a_message():
    message = ('connect to postgresql://tuner:s3cret@db/optuna failed; retry http://a:b@c:1/x '
               "(dsn: host=db user=tuner password=hunter2 dbname=optuna)")
    assert mask_text(message) == ('connect to postgresql://tuner:***@db/optuna failed; retry http://a:***@c:1/x '
                                  "(dsn: host=db user=tuner password=*** dbname=optuna)")


def test_masking_is_idempotent():
    url = "postgresql://tuner:s3cret@db/optuna?token=t"
    assert mask_url(mask_url(url)) == mask_url(url) == "postgresql://tuner:***@db/optuna?token=***"
