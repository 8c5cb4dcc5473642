"""PBT lineage: reading records, ancestry through exploits in time order, the stitched
schedule and the clone tree (no Ray)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.lineage import FINAL, HISTORIES, RECORDS, TRIALS, lineage_record
from workbench.analysis.lineage import (
    Segment,
    ancestry,
    ancestry_exploits,
    changed_hyperparameters,
    check_sequence,
    describe_changes,
    parse_jsonl,
    read_jsonl,
    render_tree,
    stitched_schedule,
)


def _spans(segments: list[Segment]) -> list[tuple[str, int, int]]:
    return [(s.trial_id, s.first_iteration, s.last_iteration) for s in segments]


# --- records ------------------------------------------------------------------------------


def test_a_record_round_trips_through_jsonl(tmp_path: Path) -> None:
    line = {
        "seq": 0,
        "time": 1764420000.5,
        "target": "a1b2c_00001",
        "target_name": "PPO_00001",
        "source": "a1b2c_00003",
        "source_name": "PPO_00003",
        "target_iteration": 8,
        "source_iteration": 8,
        "step": 8,
        "old": {"lr": 0.001, "gamma": 0.99},
        "donor": {"lr": 0.002, "gamma": 0.98},
        "new": {"lr": 0.0024, "gamma": 0.98},
        # The tracker's own fields: where the exploit was decided and where the
        # target really continued from (Tune's log is one iteration behind).
        "exploit_iteration": 9,
        "restored_iteration": 7,
        "checkpoint_iteration": 7,
        # The donor's score is from its iteration 7: the checkpoint is as new.
        "source_score_iteration": 7,
    }
    path = tmp_path / "lineage.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(RECORDS[1].to_dict()) + "\n")
    records = read_jsonl(path)
    assert [r.seq for r in records] == [0, 1]
    assert records[0].to_dict() == line
    assert records[0].donor == {"lr": 0.002, "gamma": 0.98}
    assert (records[0].stopped_at, records[0].restored_from) == (9, 7)
    assert records[1] == RECORDS[1]
    assert (records[1].stopped_at, records[1].restored_from) == (
        RECORDS[1].target_iteration,
        RECORDS[1].source_iteration,
    )
    # A record whose target has not restarted yet says where PBT's checkpoint was from;
    # Tune's source_iteration is one behind for the donor that triggered the decision.
    pending = {**line, "restored_iteration": None, "source_iteration": 6}
    assert parse_jsonl(json.dumps(pending) + "\n")[0].restored_from == 7
    assert changed_hyperparameters(records[0]) == {"lr": (0.001, 0.0024), "gamma": (0.99, 0.98)}
    assert describe_changes(records[0], limit=1) == "lr 0.001→0.0024, +1 more"


def test_a_line_still_being_written_is_skipped_but_a_broken_line_inside_is_an_error() -> None:
    whole = json.dumps(RECORDS[0].to_dict()) + "\n"
    assert parse_jsonl(whole + '{"seq": 1, "ti') == [RECORDS[0]]
    assert parse_jsonl("\n" + whole + "\n") == [RECORDS[0]]
    with pytest.raises(ValueError, match="line 1: not JSON"):
        parse_jsonl('{"seq": 1, "ti\n' + whole)
    with pytest.raises(ValueError, match=r"line 2: .*lacks source_iteration"):
        bad = {k: v for k, v in RECORDS[1].to_dict().items() if k != "source_iteration"}
        parse_jsonl(whole + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="line 1: expected a JSON object"):
        parse_jsonl("[1, 2]\n")


def test_check_sequence_finds_gaps_and_duplicates() -> None:
    assert check_sequence(RECORDS) == []
    assert check_sequence([]) == []
    records = [RECORDS[0], RECORDS[1], RECORDS[1], RECORDS[4]]  # seq 0, 1, 1, 4
    assert check_sequence(records) == ["seq 1 appears 2 times", "seq 2-3 missing"]
    assert check_sequence([RECORDS[2], RECORDS[3]]) == ["seq 0-1 missing"]
    assert check_sequence([RECORDS[0], RECORDS[2]]) == ["seq 1 missing"]


# --- ancestry -----------------------------------------------------------------------------


def test_ancestry_follows_a_chain_of_clones_back_to_an_original_trial() -> None:
    # a <- b@16 <- c@8: c's exploit from d (seq 2) came after c gave b its weights.
    segments = ancestry(RECORDS, "a", FINAL)
    assert _spans(segments) == [("c", 1, 8), ("b", 9, 16), ("a", 17, 30)]
    assert [s.trial_name for s in segments] == ["PPO_C", "PPO_B", "PPO_A"]
    assert [s.via.seq if s.via else None for s in segments] == [None, 0, 1]
    assert [r.seq for r in ancestry_exploits(RECORDS, "a", FINAL)] == [0, 1]


def test_ancestry_through_a_donor_that_was_itself_a_clone() -> None:
    # b's last exploit came from c@22, and c had been restored from d@4 (seq 2) before.
    assert _spans(ancestry(RECORDS, "b", FINAL)) == [("d", 1, 4), ("c", 5, 22), ("b", 23, 30)]
    assert _spans(ancestry(RECORDS, "c", FINAL)) == [("d", 1, 4), ("c", 5, 30)]
    # d <- a@20 <- b@16 <- c@8: d's own exploit (seq 3) came after a's (seq 1).
    segments = ancestry(RECORDS, "d", FINAL)
    assert _spans(segments) == [("c", 1, 8), ("b", 9, 16), ("a", 17, 20), ("d", 21, 30)]
    assert sum(s.iterations for s in segments) == FINAL


def test_ancestry_ignores_exploits_after_the_one_it_came_through() -> None:
    # Only seq order tells these apart: seq 2 restores c to an iteration (4) before the
    # one b cloned (8), so without seq the walk would wrongly go on into d.
    assert ("d", 1, 4) not in _spans(ancestry(RECORDS, "a", FINAL))
    # Up to seq 1 only, a's ancestry is the same (later records change nothing).
    assert _spans(ancestry(RECORDS[:2], "a", FINAL)) == _spans(ancestry(RECORDS, "a", FINAL))
    # Shuffled input: order comes from seq, not from the file.
    assert _spans(ancestry(RECORDS[::-1], "b", FINAL)) == [
        ("d", 1, 4),
        ("c", 5, 22),
        ("b", 23, 30),
    ]


def test_ancestry_without_exploits_is_the_trial_alone() -> None:
    assert _spans(ancestry([], "a", 12, name="PPO_A")) == [("a", 1, 12)]
    assert ancestry([], "a", 12, name="PPO_A")[0].trial_name == "PPO_A"
    assert _spans(ancestry(RECORDS, "zz", 5)) == [("zz", 1, 5)]


def test_a_donor_checkpoint_older_than_the_donors_last_restore_is_from_its_earlier_life() -> None:
    # x was stopped at 10 and restored to y's 5; z then cloned x's checkpoint of 4, which
    # x can only have saved before that restore (after it, x reports from 6 on), so z's
    # weights are x's own from iterations 1-4, not y's.
    records = [
        lineage_record(0, "x", "y", 10, 5, {"lr": 1.0}, {"lr": 2.0}),
        lineage_record(1, "z", "x", 12, 4, {"lr": 3.0}, {"lr": 4.0}),
    ]
    assert _spans(ancestry(records, "z", 20)) == [("x", 1, 4), ("z", 5, 20)]
    assert [r.seq for r in ancestry_exploits(records, "z", 20)] == [1]
    # A checkpoint at the very iteration x was restored to is also from before: a
    # restored trial's first report, and so its first checkpoint, is one iteration later.
    records[1] = lineage_record(1, "z", "x", 12, 5, {"lr": 3.0}, {"lr": 4.0})
    assert _spans(ancestry(records, "z", 20)) == [("x", 1, 5), ("z", 6, 20)]
    # A checkpoint past the restore point comes through it.
    records[1] = lineage_record(1, "z", "x", 12, 7, {"lr": 3.0}, {"lr": 4.0})
    assert _spans(ancestry(records, "z", 20)) == [("y", 1, 5), ("x", 6, 7), ("z", 8, 20)]
    trials = {t: (f"PPO_{t.upper()}", 20) for t in "xyz"}
    assert render_tree(trials, records, best="z").splitlines()[:4] == [
        "  PPO_X  [1-10]",
        "* PPO_Y  [1-20]",
        "* └─ it 10: PPO_X <- PPO_Y@5  lr 1→2  [6-20]",
        "*    └─ it 12: PPO_Z <- PPO_X@7  lr 3→4  [8-20]  (best)",
    ]
    # The tree hangs a clone of an earlier life's checkpoint under that life.
    records[1] = lineage_record(1, "z", "x", 12, 4, {"lr": 3.0}, {"lr": 4.0})
    assert render_tree(trials, records, best="z").splitlines()[:4] == [
        "* PPO_X  [1-10]",
        "* └─ it 12: PPO_Z <- PPO_X@4  lr 3→4  [5-20]  (best)",
        "  PPO_Y  [1-20]",
        "  └─ it 10: PPO_X <- PPO_Y@5  lr 1→2  [6-20]",
    ]


# --- stitched schedule --------------------------------------------------------------------


def test_stitched_schedule_along_a_chain() -> None:
    schedule = stitched_schedule(ancestry(RECORDS, "a", FINAL), HISTORIES)
    # c trained 5..8 with lr 3 before seq 2; its history shows lr 5 there (c's later life).
    assert schedule["lr"] == [(1, 3.0), (9, 3.5), (17, 4.5)]
    assert schedule["gamma"] == [(1, 0.99), (17, 0.95)]  # no change point at 9: same value
    schedule = stitched_schedule(ancestry(RECORDS, "d", FINAL), HISTORIES)
    assert schedule["lr"] == [(1, 3.0), (9, 3.5), (17, 4.5), (21, 6.0)]
    assert schedule["gamma"] == [(1, 0.99), (17, 0.95)]


def test_stitched_schedule_through_a_clone_of_a_clone() -> None:
    schedule = stitched_schedule(ancestry(RECORDS, "b", FINAL), HISTORIES)
    assert schedule == {"lr": [(1, 4.0), (5, 5.0), (23, 7.0)], "gamma": [(1, 0.99)]}


def test_stitched_schedule_keeps_changes_inside_a_segment_and_reads_sparse_histories() -> None:
    segments = [Segment("p", "P", 1, 10), Segment("q", "Q", 11, 20)]
    histories = {
        "p": {"lr": [(1, 0.1), (4, 0.05), (12, 9.9)], "opt": [(1, "adam")]},
        "q": {"lr": [(1, 0.5), (15, 0.01)], "opt": [(1, "adam"), (18, "sgd")]},
    }
    assert stitched_schedule(segments, histories) == {
        "lr": [(1, 0.1), (4, 0.05), (11, 0.5), (15, 0.01)],
        "opt": [(1, "adam"), (18, "sgd")],
    }
    assert stitched_schedule([], histories) == {}


def test_stitched_schedule_falls_back_to_the_exploits_values_without_histories() -> None:
    schedule = stitched_schedule(ancestry(RECORDS, "d", FINAL), {})
    # The root segment's values are unknown without a history; each exploit's are known.
    assert schedule["lr"] == [(9, 3.5), (17, 4.5), (21, 6.0)]


# --- tree ---------------------------------------------------------------------------------


def test_render_tree_shows_who_cloned_whom_and_marks_the_best_ancestry() -> None:
    expected = textwrap.dedent(
        """\
          PPO_A  [1-16]
          PPO_B  [1-8]
        * PPO_C  [1-12]
        * └─ it 8: PPO_B <- PPO_C@8  lr 2→3.5  [9-24]
        *    └─ it 16: PPO_A <- PPO_B@16  lr 1→4.5, gamma 0.99→0.95  [17-30]
        *       └─ it 20: PPO_D <- PPO_A@20  lr 4→6, gamma 0.99→0.95  [21-30]  (best)
          PPO_D  [1-20]
          └─ it 12: PPO_C <- PPO_D@4  lr 3→5  [5-30]
             └─ it 24: PPO_B <- PPO_C@22  lr 3.5→7  [23-30]
          * = the best trial PPO_D's final policy and the weights it came from"""
    )
    assert render_tree(TRIALS, RECORDS, best="d") == expected
    assert render_tree(TRIALS, RECORDS[::-1], best="d") == expected  # deterministic


def test_render_tree_branches_siblings_and_formats_floats() -> None:
    records = [
        lineage_record(
            0, "b", "a", 8, 8, {"lr": 0.001, "clip": 0.2}, {"lr": 0.0024123, "clip": 0.2}
        ),
        lineage_record(1, "c", "a", 8, 8, {"lr": 0.003}, {"lr": 0.0012}),
    ]
    trials = {"a": ("PPO_A", 20), "b": ("PPO_B", 20), "c": ("PPO_C", 20)}
    lines = render_tree(trials, records, best="b").splitlines()
    assert lines[:3] == [
        "* PPO_A  [1-20]",
        "* ├─ it 8: PPO_B <- PPO_A@8  lr 0.001→0.002412  [9-20]  (best)",
        "  └─ it 8: PPO_C <- PPO_A@8  lr 0.003→0.0012  [9-20]",
    ]


def test_render_tree_without_exploits_or_best() -> None:
    text = render_tree({"b": ("PPO_B", 3), "a": ("PPO_A", 5)}, [])
    assert text == "  PPO_A  [1-5]\n  PPO_B  [1-3]\n  (no exploits yet)"
    asha = render_tree(
        {"a": ("PPO_A", 5)},
        [],
        no_exploits="no exploits: asha does not clone members, PBT and PB2 do",
    )
    assert asha.endswith("(no exploits: asha does not clone members, PBT and PB2 do)")
    assert "*" not in render_tree(TRIALS, RECORDS)


def test_render_tree_marks_the_results_policy_of_its_iteration() -> None:
    # The result is PPO_B's policy of iteration 12: the weights it had from PPO_C@8 (seq 0),
    # not its final ones (from PPO_C@22, seq 4, whose ancestry goes back to PPO_D).
    expected = textwrap.dedent(
        """\
          PPO_A  [1-16]
          PPO_B  [1-8]
        * PPO_C  [1-12]
        * └─ it 8: PPO_B <- PPO_C@8  lr 2→3.5  [9-24]  (best)
             └─ it 16: PPO_A <- PPO_B@16  lr 1→4.5, gamma 0.99→0.95  [17-30]
                └─ it 20: PPO_D <- PPO_A@20  lr 4→6, gamma 0.99→0.95  [21-30]
          PPO_D  [1-20]
          └─ it 12: PPO_C <- PPO_D@4  lr 3→5  [5-30]
             └─ it 24: PPO_B <- PPO_C@22  lr 3.5→7  [23-30]
          * = the population's result, PPO_B's policy of iteration 12, and the weights"""
    )
    expected += " it came from"
    assert render_tree(TRIALS, RECORDS, best="b", best_iteration=12) == expected
    final = render_tree(TRIALS, RECORDS, best="b")
    assert "*    └─ it 24: PPO_B <- PPO_C@22  lr 3.5→7  [23-30]  (best)" in final.splitlines()
    assert final.endswith("* = the best trial PPO_B's final policy and the weights it came from")
    # Of its final life, the iteration named: the same marks as its final policy's.
    late = render_tree(TRIALS, RECORDS, best="b", best_iteration=28)
    assert late.splitlines()[:-1] == final.splitlines()[:-1]
    assert late.splitlines()[-1].endswith(
        "PPO_B's policy of iteration 28, and the weights it came from"
    )


def test_render_tree_marks_a_result_from_before_the_members_exploit() -> None:
    # PPO_D's policy of iteration 10: its own root weights, before it cloned PPO_A at 20.
    lines = render_tree(TRIALS, RECORDS, best="d", best_iteration=10).splitlines()
    assert [line for line in lines if line.startswith("*")] == ["* PPO_D  [1-20]  (best)"]
