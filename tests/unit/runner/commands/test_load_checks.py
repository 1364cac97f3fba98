"""What kvtop load says beyond its figures: a level whose per-user rate the roof and the
load do not explain is flagged with why (a trial's 1.53 -> 10.82 -> 1.08 tok/s per user at
1, 2 and 3 users was printed without a word), and a busy machine (others' CPU a quarter
or more, a local server) is named in the row, as bench does."""

from __future__ import annotations

from kvtop.runner.commands.load_checks import level_checks, run_busy, run_share, unexplained
from kvtop.runner.commands.load_rows import FIELDS
from kvtop.runner.commands.load_say import check_level


def row(users, per_user, gen=None, roof=None, share=None, slots=4, server="http://127.0.0.1:8080", window=10.0):
    r = dict.fromkeys(FIELDS)
    r.update(server=server, users=users, slots=slots, per_user_gen_tok_s=per_user,
             gen_tok_s=gen if gen is not None else per_user * min(users, slots), batched_roof_tok_s=roof,
             others_cpu_share=share, window_s=window, completed=2, failed=0)
    return r


def sweep(*rows, local=True):
    done = []
    notes = []
    for r in rows:
        notes += check_level([r], done, local, f"{r['users']} users")
        done.append(r)
    return done, notes


def test_the_trials_rates_are_flagged_with_why():
    rows, notes = sweep(row(1, 1.53), row(2, 10.82), row(3, 1.08))
    assert rows[0]["unexplained"] is None
    assert "rose 7.1x (1.53 -> 10.82 tok/s) from 1 user" in rows[1]["unexplained"], rows[1]
    assert "cannot make each user faster" in rows[1]["unexplained"]
    assert "fell to 0.10x (10.82 -> 1.08 tok/s) from 2 users" in rows[2]["unexplained"], rows[2]
    assert "1.5x the users decoding explain 1/1.5 (0.67x) at most" in rows[2]["unexplained"]
    assert sum("is not explained by the roof and the load" in n for n in notes) == 2, notes


def test_batching_as_the_physics_has_it_is_not_flagged():
    """Each user's rate holding (bandwidth-bound) or falling to 1/k (compute-bound) is what
    the roof and the load explain; more users than slots batch as the slots."""
    rows, notes = sweep(row(1, 20.0), row(2, 19.0), row(4, 9.0), row(8, 8.5))
    assert [r["unexplained"] for r in rows] == [None] * 4 and notes == []


def test_a_rate_above_the_roofs_share_says_the_roof_is_not_this_servers():
    r = row(2, 60.0, gen=80.0, roof=100.0)
    assert "above the roof's share (100.0 tok/s / 2 decoding = 50.00)" in unexplained(r, [])
    r = row(2, 40.0, gen=130.0, roof=100.0)
    assert "all users' 130.00 tok/s is above the roof (100.0 tok/s)" in unexplained(r, [])


def test_the_likely_cause_is_named_when_the_others_cpu_differed():
    rows, _ = sweep(row(1, 1.53, share=0.65), row(2, 10.82, share=0.05))
    assert "other processes took 5% of the CPU here, 65% there: likely the cause" in rows[1]["unexplained"]


def test_a_busy_machine_is_named_in_the_row_and_the_notes_for_a_local_server_only():
    rows, notes = sweep(row(1, 10.0, share=0.62), row(2, 9.5, share=0.10))
    assert rows[0]["busy"] == "other processes used 62% of the CPU during this level: figures are low"
    assert rows[1]["busy"] is None
    assert notes == ["1 users: other processes used 62% of the CPU during this level: figures are low"]
    # the run: the others' share by each level's time
    assert abs(run_share(rows) - 0.36) < 1e-9
    assert run_busy(rows, True) == "other processes used 36% of the CPU during this run: figures are low"
    remote = level_checks(row(1, 10.0, share=0.9), [], local=False)
    assert remote["busy"] is None and run_busy([remote], False) is None
