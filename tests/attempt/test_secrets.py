"""Secret values: the caller's environment first, then $TPUJOB_HOME/secrets.env (mode 600 only)."""

from __future__ import annotations

import pytest

from tpujob.attempt import secrets
from tpujob.errors import EXIT_CONFIG, ConfigError


def write_file(home, text: str, mode: int = 0o600):
    home.mkdir(parents=True, exist_ok=True)
    path = home / "secrets.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_environment_wins_and_the_file_fills_the_gaps(tpujob_home):
    write_file(tpujob_home, "# for cron\nexport A=from-file\nB='quoted value = x'\n\nC=\"c d\"\n")
    assert secrets.resolve(["A", "B", "C"], {"A": "from-env"}) == {
        "A": "from-env", "B": "quoted value = x", "C": "c d"}


def test_the_file_is_not_read_when_the_environment_has_everything(tpujob_home):
    write_file(tpujob_home, "A=1\n", mode=0o644)   # would be refused if read
    assert secrets.resolve(["A"], {"A": "x"}) == {"A": "x"}


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_file_readable_by_others_is_refused_in_one_line(tpujob_home, mode):
    path = write_file(tpujob_home, "A=s3cret-value\n", mode=mode)
    with pytest.raises(ConfigError) as err:
        secrets.resolve(["A"], {})
    assert err.value.exit_code == EXIT_CONFIG
    assert str(err.value) == (f"{path} is readable by group or others (mode {mode:o}): refusing to read "
                              f"secrets from it; run chmod 600 {path}")


def test_a_missing_secret_names_itself_and_where_it_was_looked_for(tpujob_home):
    with pytest.raises(ConfigError) as err:
        secrets.resolve(["A", "B"], {"A": "x"})
    assert str(err.value) == (f"secret B not set: export it or put it in {tpujob_home / 'secrets.env'} "
                              "(KEY=VALUE lines, mode 600)")


def test_a_malformed_line_is_refused_without_echoing_it(tpujob_home):
    write_file(tpujob_home, "A=1\nthis is s3cret\n")
    with pytest.raises(ConfigError) as err:
        secrets.resolve(["B"], {})
    assert "line 2: expected KEY=VALUE" in str(err.value) and "s3cret" not in str(err.value)


def test_masking_uses_every_value_it_can_read_when_one_is_missing(tpujob_home, monkeypatch):
    """A sweep from cron may see some secrets and not others: each value it can read is still
    masked from what the hosts said, not none of them."""
    write_file(tpujob_home, "B=from-file\n")
    monkeypatch.delenv("A", raising=False)
    monkeypatch.setenv("C", "from-env")
    assert secrets.readable(["A", "B", "C"]) == ("from-file", "from-env")


def test_masking_keeps_the_environments_values_when_the_file_cannot_be_read(tpujob_home, monkeypatch):
    monkeypatch.setenv("A", "from-env")
    monkeypatch.delenv("B", raising=False)
    write_file(tpujob_home, "B=from-file\n", mode=0o644)  # refused: too loose
    assert secrets.readable(["A", "B"]) == ("from-env",)
    write_file(tpujob_home, "not a pair\n")  # refused: malformed
    assert secrets.readable(["A", "B"]) == ("from-env",)
