"""Answer equivalence: a hand-checked table, the MATH file against itself, hostile inputs.

"Its own LaTeX rendering" of a MATH ``gt_answer`` (which is a bare LaTeX fragment such as
``\\frac{3}{13}``) means the ways a model writes that same fragment as a final answer: wrapped in
``\\boxed{...}``, in inline math ``$...$``, in ``\\(...\\)``, and boxed inside math
``$\\boxed{...}$``. Each must be judged equivalent to the bare ground truth. Separately, math-verify
itself (no string shortcut) must accept every ground truth against itself: on a deterministic
sample of 300 here, on all 8,521 non-empty answers in the slow test. The file has two records with an
empty ``gt_answer``; the loader drops them and they are excluded here.
"""

from __future__ import annotations

import random
import re

import pytest

from arl.envs.math_tool.equivalence import (
    _CHECKER,
    as_fraction,
    checker_stats,
    is_equivalent,
    library_equivalent,
    normalise_answer,
    unwrap_boxed,
)
from arl_testing import SHARED_DATA

MATH_FILE = SHARED_DATA / "math" / "train_new.parquet"

# (answer, ground truth, equivalent?) -- each checked by hand
TABLE = [
    # integers, signs, decimals
    ("42", "42", True),
    ("042", "42", True),
    ("-7", "-7", True),
    ("7", "-7", False),
    ("3", "4", False),
    ("2.50", "2.5", True),
    ("2.5", "2.05", False),
    (".5", "0.5", True),
    ("1,000", "1000", True),
    ("1,000,000", "10^6", True),
    ("12345", "12,345", True),
    # fractions in every spelling
    ("0.5", "\\frac{1}{2}", True),
    ("1/2", "\\frac12", True),
    ("\\dfrac{3}{13}", "\\frac{3}{13}", True),
    ("\\tfrac{3}{2}", "1.5", True),
    ("-\\frac{2}{3}", "\\frac{-2}{3}", True),
    ("\\frac{2}{4}", "\\frac{1}{2}", True),
    ("15/14", "\\frac{15}{14}", True),
    ("-\\frac{5}{4}", "-1.25", True),
    ("\\frac{5}{4}", "-\\frac{5}{4}", False),
    ("0.333", "\\frac{1}{3}", False),
    ("\\frac{1}{3}", "\\frac{1}{4}", False),
    ("\\frac 9{20}", "0.45", True),
    # percentages (the number before the percent sign), units, degrees, money
    ("50\\%", "50", True),
    ("50%", "50", True),
    ("12.5\\%", "12.5", True),
    ("50\\%", "0.5", False),
    ("5 \\text{ cm}", "5", True),
    ("5\\text{ cm}", "5", True),
    ("12 dollars", "12", True),
    ("2 pi", "2", False),
    ("\\$12.50", "12.5", True),
    ("45^\\circ", "45", True),
    ("45^{\\circ}", "45", True),
    ("30^\\circ", "45", False),
    ("7 \\text{ cm}", "5", False),
    # wrappers and assignments
    ("\\boxed{7}", "7", True),
    ("$\\boxed{7}$", "7", True),
    ("\\(7\\)", "7", True),
    ("$x = 3$", "3", True),
    ("x=3", "3", True),
    ("y = 4", "3", False),
    ("\\left( 1, 2 \\right)", "(1,2)", True),
    # radicals, pi, expressions
    ("\\sqrt{4}", "2", True),
    ("2\\sqrt2", "\\sqrt8", True),
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("\\sqrt{3}", "3", False),
    ("2 \\pi + 4", "4+2\\pi", True),
    ("\\pi", "3.14", False),
    ("x^2+2x+1", "(x+1)^2", True),
    ("2x", "x^2", False),
    ("\\frac{x}{2}", "\\frac{1}{2}x", True),
    ("a+b", "b+a", True),
    ("a-b", "b-a", False),
    # intervals, sets, tuples, lists of answers
    ("[0,3)", "[0,3)", True),
    ("[0,3]", "[0,3)", False),
    ("(-\\infty,-8)\\cup (8,\\infty)", "(-\\infty,-8)\\cup(8,\\infty)", True),
    ("(-\\infty, 2]", "(-\\infty, 2)", False),
    ("\\{1,2\\}", "\\{2,1\\}", True),
    ("\\{1,2\\}", "\\{1,3\\}", False),
    ("2,16", "16,2", True),
    ("-12 \\text{ or } -30", "-30, -12", True),
    ("(1, 2)", "(1, 2)", True),
    ("(2, 1)", "(1, 2)", False),
    # matrices and ratios
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ("\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", False),
    ("1:4", "\\frac14", True),
    # not answers at all
    ("", "3", False),
    ("   ", "3", False),
    ("three", "3", False),
]


def test_the_table_is_big_enough_and_balanced():
    assert len(TABLE) >= 60
    assert sum(1 for *_, eq in TABLE if eq) >= 30 and sum(1 for *_, eq in TABLE if not eq) >= 20


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer, truth, expected", TABLE)
def test_equivalence_table(answer, truth, expected):
    assert is_equivalent(answer, truth) is expected


def test_normalisation_examples():
    assert normalise_answer("\\boxed{\\dfrac{3}{4}}") == "\\frac{3}{4}"
    assert normalise_answer("$\\boxed{ 12\\% }$") == "12"
    assert normalise_answer("x = 1,234.5") == "1234.5"
    assert normalise_answer("5\\text{ cm}.") == "5"
    assert normalise_answer("\\left[ 0, 1 \\right)") == "[ 0, 1 )"
    assert as_fraction("\\frac{-3}{6}") == as_fraction("-1/2") == as_fraction("-0.5")
    assert as_fraction("\\frac{1}{0}") is None and as_fraction("x") is None


def test_unwrap_boxed():
    assert unwrap_boxed("so \\boxed{\\frac{1}{2}} is it") == "\\frac{1}{2}"
    assert unwrap_boxed("\\boxed{1} then \\boxed{2}") == "2"
    assert unwrap_boxed("\\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert unwrap_boxed("\\boxed 5") == "5"
    assert unwrap_boxed("\\fbox{3}") == "3"
    assert unwrap_boxed("\\boxed{5") is None
    assert unwrap_boxed("\\boxed") is None
    assert unwrap_boxed("no box") is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "answer",
    ["", "}", "{{{{", "\\boxed{", "\\frac{", "\x00\x01\x1b[31m", "x" * 100_000, "1" * 5000,
     "\\sqrt" * 2000, "9^{9^{9^{9}}}", "10^{10^{10}}", "(" * 3000, "\ud800", "\\begin{pmatrix}"],
)
def test_hostile_answers_never_raise(answer):
    # each check is cut by the hard timeout at worst; one that hung would hit the test's timeout
    assert is_equivalent(answer, "3") is False
    assert is_equivalent("3", answer) is False


@pytest.mark.timeout(120)
def test_a_hanging_check_is_killed_and_the_checker_recovers():
    """A check stuck where no signal reaches it (simulated by a sleeping helper) is cut at the
    hard timeout: the helper is killed and restarted for the next check."""
    assert library_equivalent("\\sqrt{16}", "4")  # the helper is up
    restarts, timeouts = checker_stats()["restarts"], checker_stats()["timeouts"]
    assert _CHECKER.request({"sleep": 30, "g": "1", "p": "1", "t": 1}, 1.0) is False  # cut, not slept out:
    assert checker_stats()["timeouts"] == timeouts + 1  # the test's 120 s timeout catches a 30 s sleep
    assert library_equivalent("\\sqrt{9}", "3")  # a fresh helper answers
    assert checker_stats()["restarts"] == restarts + 1
    # math-verify's own timeouts stop slow-but-interruptible sympy work without a restart
    assert _CHECKER.check("10^{10^{10}}", "3", 3.0) is False
    assert not is_equivalent(None, "3") and not is_equivalent("3", 3)  # type: ignore[arg-type]


# --- the MATH file ----------------------------------------------------------------------------------
def _math_answers() -> list[str]:
    if not MATH_FILE.exists():
        pytest.skip(f"MATH data not found at {MATH_FILE}")
    from arl.envs.math_tool.data import load_records

    return [r.answer for r in load_records(MATH_FILE)]


def renderings(truth: str) -> list[str]:
    """The LaTeX renderings of a bare ground truth a model may write (see the module doc)."""
    return [truth, f"\\boxed{{{truth}}}", f"${truth}$", f"\\({truth}\\)", f"$\\boxed{{{truth}}}$"]


@pytest.mark.timeout(300)
def test_every_math_answer_matches_its_renderings():
    answers = _math_answers()
    assert len(answers) == 8521  # 8,523 rows minus two empty gt_answer
    bad = [(r, t) for t in answers for r in renderings(t) if not is_equivalent(r, t)]
    assert not bad, bad[:10]


def respelled(truth: str) -> str:
    """The same answer written differently: display fractions, spaces after commas and around
    the operators (a different string whenever the answer has any of those)."""
    return re.sub(r"(?<![dt])\\frac", r"\\dfrac", truth).replace(",", ", ").replace("+", " + ").replace("=", " = ")


@pytest.mark.timeout(300)
def test_math_verify_accepts_a_sample_of_math_answers_against_themselves():
    """math-verify alone parses every sampled ground truth (against itself, the test of the slow
    suite over all of them), accepts another spelling of it, and rejects the numeric answers
    moved by one."""
    answers = _math_answers()
    sample = random.Random(0).sample(answers, 300)
    bad = [t for t in sample if not library_equivalent(normalise_answer(t), normalise_answer(t))]
    assert not bad, bad
    other = [(t, respelled(t)) for t in sample if respelled(t) != t]
    assert len(other) > 50
    bad = [pair for pair in other if not library_equivalent(normalise_answer(pair[1]), normalise_answer(pair[0]))]
    assert not bad, bad[:10]
    numbers = [(t, as_fraction(normalise_answer(t))) for t in sample]
    moved = [(t, f"{v + 1}") for t, v in numbers if v is not None]
    assert len(moved) > 50
    wrong = [pair for pair in moved if library_equivalent(normalise_answer(pair[1]), normalise_answer(pair[0]))]
    assert not wrong, wrong[:10]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_math_verify_accepts_every_math_answer_against_itself():
    answers = _math_answers()
    bad = [t for t in answers if not library_equivalent(normalise_answer(t), normalise_answer(t))]
    assert not bad, bad
