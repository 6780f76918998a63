"""`validate` and `create` read Google's zone table: a placement whose zone does not offer its
accelerator is a warning (the table may lag Google's live list); `--strict` refuses it, exit 2,
before anything is recorded or the cloud is touched."""

from __future__ import annotations

# v5e is not offered in us-central2-b; asia-northeast1-a offers no TPUs at all.
UNOFFERED = ("name: demo\ntpu: {accelerator: v5litepod-4, zone: us-central2-b, project: lab,\n"
             "      fallback: [{zone: us-west4-a}, {zone: asia-northeast1-a}]}\nrun: {command: x}\n")
OFFERED = "name: demo\ntpu: {accelerator: v5litepod-4, zone: us-west4-a, project: lab}\nrun: {command: x}\n"
PRIMARY = "warning: tpu: zone us-central2-b does not offer v5litepod-4 in Google's published table"
FALLBACK = "warning: tpu.fallback[1]: zone asia-northeast1-a offers no TPUs in Google's published table"


def test_validate_warns_of_each_placement_the_table_does_not_list(cli, spec_file):
    result = cli("validate", spec_file(UNOFFERED))
    assert result.code == 0 and result.out.rstrip().endswith("spec is valid")
    warnings = result.err.strip().splitlines()
    assert len(warnings) == 2
    assert warnings[0].startswith(PRIMARY) and "us-west4-a" in warnings[0]
    assert warnings[0].endswith("Google would refuse the create")
    assert warnings[1].startswith(FALLBACK)


def test_validate_strict_refuses_exit_2(cli, spec_file):
    result = cli("validate", "--strict", "--json", spec_file(UNOFFERED))
    assert result.code == 2 and result.out == ""
    assert result.error_line.startswith("error: tpu: zone us-central2-b does not offer v5litepod-4")
    assert result.error_line.endswith("(refused with --strict)")


def test_an_offered_placement_says_nothing(cli, spec_file):
    for args in (("validate",), ("validate", "--strict")):
        result = cli(*args, spec_file(OFFERED))
        assert (result.code, result.err) == (0, "")


def test_create_warns_and_records(cli, spec_file, stored_jobs, offline):
    result = cli("create", spec_file(UNOFFERED))
    assert result.code == 0, result.err
    assert PRIMARY in result.err and FALLBACK in result.err
    assert stored_jobs() == 1


def test_create_strict_refuses_before_anything_is_recorded_or_spent(cli, spec_file, stored_jobs, offline,
                                                                    tpujob_home):
    result = cli("create", "--strict", spec_file(UNOFFERED))
    assert result.code == 2
    assert result.err.strip().splitlines()[-1].startswith("error: tpu: zone us-central2-b does not offer")
    assert stored_jobs() == 0 and offline == []
    dry = cli("create", "--dry-run", "--strict", spec_file(UNOFFERED))
    assert dry.code == 2 and dry.out == ""
