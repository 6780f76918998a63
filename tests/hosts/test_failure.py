"""The cause line of a failed host step: bounded, one line, secrets redacted."""

from __future__ import annotations

from tpujob.hosts.fanout import HostResult
from tpujob.hosts.host_output import MAX_CHARS, cause, last_lines, redact


def test_the_last_five_non_empty_lines_in_one_line():
    text = "\n".join(f"line {i}" for i in range(1, 9)) + "\n\n   \n"
    assert last_lines(text) == "line 4 | line 5 | line 6 | line 7 | line 8"
    assert last_lines("") == "" and last_lines("\n \n") == ""


def test_a_progress_bar_and_terminal_colours_leave_their_last_state():
    assert last_lines("get 10%\rget 50%\rget 100%\r\n\x1b[31merror:\x1b[0m no space left\n") == \
        "get 100% | error: no space left"


def test_the_newest_lines_stay_whole_and_the_oldest_loses_its_start():
    chain = "daemonize.Run: " + "prefix: " * 40 + "storage: bucket doesn't exist"
    text = f"{chain}\nhint: it is gone\nsummary: could not mount (exit 1)"
    said = last_lines(text)
    assert len(said) <= MAX_CHARS
    assert said.endswith("storage: bucket doesn't exist | hint: it is gone | summary: could not mount (exit 1)")
    assert said.startswith("…")
    # One huge line: its end, within bounds.
    huge = last_lines("x" * 10_000 + " the reason")
    assert len(huge) <= MAX_CHARS and huge.endswith("the reason")
    # An older line that would keep only a few characters is left out.
    assert last_lines("y" * 500 + "\n" + "z" * 300 + "\n" + "w" * 70) == "z" * 300 + " | " + "w" * 70


def test_secret_values_and_credential_pairs_are_masked():
    text = "token is s3cr3t-value\nHF_TOKEN=hf_abc DB_PASSWORD='a b' api-key=k1 PWD=/home/me mode=fast\n"
    said = last_lines(text, ["s3cr3t-value"])
    assert said == "token is *** | HF_TOKEN=*** DB_PASSWORD=*** api-key=*** PWD=/home/me mode=fast"
    assert redact("Authorization: Bearer ya29.a0AfH6", ()) == "Authorization: Bearer ***"
    # A longer secret containing a shorter one is masked whole, not in pieces.
    assert redact("abc abcdef", ["abc", "abcdef"]) == "*** ***"


def test_a_secret_is_masked_before_the_line_is_cut():
    secret = "Q" * 50
    said = last_lines("a" * 300 + secret + "\n" + "b" * 300, [secret], chars=400)
    assert "Q" not in said


def test_cause_prefers_stderr_and_says_how_the_step_ended():
    result = HostResult(0, exit_code=3, output="downloading\nboom\n", stderr="boom\n")
    assert cause(result) == "exit code 3: boom"
    assert cause(HostResult(1, exit_code=2, output="only stdout\n")) == "exit code 2: only stdout"
    assert cause(HostResult(2, exit_code=1)) == "exit code 1"
    timed_out = HostResult(3, output="pip: still resolving\n", error="timed out after 30s", timed_out=True)
    assert cause(timed_out) == "timed out after 30s: pip: still resolving"
    assert cause(HostResult(4, exit_code=1, stderr="KEY=v TOKEN=abc\n"), ["v"]) == "exit code 1: KEY=*** TOKEN=***"
    many = cause(HostResult(5, exit_code=1, stderr="x" * 1000 + " why\n"), chars=80)
    assert many.startswith("exit code 1: …") and many.endswith(" why") and len(many) == len("exit code 1: ") + 80
