"""`fullpipe trace`: usage errors on any machine."""

from __future__ import annotations

from fullpipe import cli


def test_trace_unknown_experiment_exits_2_with_the_known_names(capsys):
    assert cli.main(["trace", "no-such-experiment", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'no-such-experiment'" in err and "known:" in err


def test_trace_is_a_subcommand_with_out_and_quick():
    args = cli.build_parser().parse_args(["trace", "overlap", "--quick", "--out", "x"])
    assert args.func is cli.cmd_trace and args.quick and args.out == "x" and args.name == "overlap"
