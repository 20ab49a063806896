"""`hf-norms env` shows where requests go without a URL's user and password (issue 54, item 4)."""

from __future__ import annotations

import pytest

from hf_norms import cli
from hf_norms.environment import PROXY_VARIABLES

SECRET_USER, SECRET_PASSWORD = "alice-user", "s3cr3t-pa55"
# (what a variable holds, what the report shows): passwords with the characters that split a URL
CASES = [
    (f"http://{SECRET_USER}:{SECRET_PASSWORD}@proxy.example:3128", "http://***@proxy.example:3128"),
    (f"{SECRET_USER}:{SECRET_PASSWORD}@proxy.example:3128", "***@proxy.example:3128"),  # no scheme
    (f"https://{SECRET_USER}:{SECRET_PASSWORD}/x@proxy.example/path", "https://***@proxy.example/path"),
    (f"socks5://{SECRET_USER}:{SECRET_PASSWORD}@x,y@proxy.example:1080", "socks5://***@proxy.example:1080"),
    (f"http://{SECRET_USER}:{SECRET_PASSWORD} z@proxy.example", "http://***@proxy.example"),
    ("http://proxy.example:3128", "http://proxy.example:3128"),  # nothing to hide: shown as set
]


@pytest.mark.parametrize(("value", "shown"), CASES)
def test_the_endpoint_and_every_proxy_variable_are_shown_without_user_and_password(value, shown, capsys, monkeypatch):
    for name in ("HF_ENDPOINT", *PROXY_VARIABLES):
        monkeypatch.setenv(name, value)
    assert cli.main(["env"]) == 0
    out, err = capsys.readouterr()
    assert SECRET_USER not in out + err and SECRET_PASSWORD not in out + err
    lines = out.splitlines()
    for name in ("HF_ENDPOINT", *PROXY_VARIABLES):
        assert f"- {name}: {shown}" in lines


def test_unset_proxy_variables_are_not_listed(capsys, monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    assert cli.main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "proxy" in line.lower()] == ["- no_proxy: localhost,127.0.0.1"]
