"""``rlvr sample`` / ``rlvr score``: the environments from the command line."""

from __future__ import annotations

import json

from rlvr.cli import main


def _answer(gt: str) -> str:
    """A right answer to a sampled K&K row, whose ground truth is Logic-RL's answer lines (as
    every export writes it)."""
    return f" reasoning </think>\n<answer>\n{gt}\n</answer>"


def test_sample_then_score_kk(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    assert (
        main(["sample", "--env", "kk", "-n", "3", "--seed", "5", "--out", str(tasks), "n_people=3"])
        == 0
    )
    recs = [json.loads(line) for line in tasks.read_text().splitlines()]
    assert [r["seed"] for r in recs] == [5, 6, 7] and all(r["n_people"] == 3 for r in recs)
    # Right, wrong, and a malformed line.
    lines = [
        dict(recs[0], response=_answer(recs[0]["ground_truth"])),
        dict(recs[1], response="<answer>nonsense</answer>"),
    ]
    inp = tmp_path / "resp.jsonl"
    inp.write_text("\n".join(json.dumps(line) for line in lines) + "\n{not json\n")
    out = tmp_path / "scored.jsonl"
    capsys.readouterr()
    assert main(["score", "--env", "kk", str(inp), "--out", str(out), "prefilled_think=true"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scored"] == 2 and summary["skipped"] == 1 and summary["accuracy"] == 0.5
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored[0]["reward"] == 3.0 and scored[0]["correct"] is True
    assert scored[1]["correct"] is False


def test_sample_is_deterministic(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for p in (a, b):
        assert (
            main(
                [
                    "sample",
                    "--env",
                    "math",
                    "-n",
                    "4",
                    "--seed",
                    "1",
                    "--out",
                    str(p),
                    "dataset=synthetic",
                ]
            )
            == 0
        )
    assert a.read_text() == b.read_text()


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip()


def test_bad_env_arguments_are_one_line_exit_2(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "x", "ground_truth": "1"}\n')
    for argv, needle in (
        (["sample", "--env", "kk", "n_people=0"], "n_people"),
        (["sample", "--env", "math", "bogus=1"], "bogus"),
        (["score", "--env", "math", str(src), "timeout_s=.nan"], "timeout_s"),
        (["score", "--env", "kk", str(src), "bogus=1"], "bogus"),
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
