"""Generated math problems (exact, deterministic, self-consistent) and the data-file loader."""

from __future__ import annotations

import contextlib
import io
import json
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.envs.math_tool.data import load_records, split_indices
from arl.envs.math_tool.equivalence import as_fraction, normalise_answer
from arl.envs.math_tool.problems import TEMPLATES, check_templates, generate_problem, latex_number
from arl_testing import SHARED_DATA

MATH_FILE = SHARED_DATA / "math" / "train_new.parquet"


def run_snippet(code: str) -> str:
    """The solution snippet's stdout, executed in-process (it is our own trusted code)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<snippet>", "exec"), {})  # noqa: S102 - our own snippet, as the docstring says
    return buf.getvalue().strip()


# --- generator -------------------------------------------------------------------------------------
def test_hand_checked_problems():
    p = generate_problem(0)
    assert p.question == "Compute 1/2 + 4/7. Give the answer as a reduced fraction."
    assert p.answer == "\\frac{15}{14}"  # 7/14 + 8/14
    assert p.template == "fractions" and p.task_type == "arithmetic"
    p = generate_problem(1)
    assert p.question == (
        "A train goes 90 km per hour for 3 hours, then 40 km per hour for 2 hours. How many km does it travel?"
    )
    assert p.answer == "350"  # 270 + 80
    p = generate_problem(2)
    assert p.question == "Solve -3x + 5y = -37 and 2x - 6y = 30. What is x + y?"
    assert p.answer == "7" and p.task_type == "algebra"  # x = 9, y = -2
    p = generate_problem(3)
    assert p.question == "Compute (20 + 23) * 9 - 80 / 8." and p.answer == "377"  # 387 - 10


def test_latex_number():
    assert latex_number(8) == "8"
    assert latex_number(Fraction(-5, 4)) == "-\\frac{5}{4}"
    assert latex_number(Fraction(6, 3)) == "2"
    assert latex_number(Fraction(0)) == "0"


def test_deterministic_and_varied():
    first = [generate_problem(s) for s in range(100)]
    assert first == [generate_problem(s) for s in range(100)]
    assert len({p.question for p in first}) >= 95
    assert {p.template for p in first} == set(TEMPLATES)


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_every_snippet_prints_the_exact_answer(template):
    for seed in range(300):
        p = generate_problem(seed, [template])
        assert p.template == template
        printed = run_snippet(p.code)
        assert as_fraction(printed) == as_fraction(normalise_answer(p.answer)), (seed, p, printed)
        assert len(p.question) <= 160 and len(p.code) <= 260


def _sympy_side(text: str):
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    return parse_expr(text, transformations=standard_transformations + (implicit_multiplication_application,))


@pytest.mark.parametrize("template", ["linear_equation", "linear_system"])
def test_the_question_text_has_the_stated_answer(template):
    """The equations as written (not the snippet) are solved independently by sympy."""
    import sympy

    x, y = sympy.symbols("x y")
    for seed in range(25):
        p = generate_problem(seed, [template])
        if template == "linear_equation":
            left, right = re.match(r"Solve for x: (.*) = (.*)\.$", p.question).groups()
            (value,) = sympy.solve(sympy.Eq(_sympy_side(left), _sympy_side(right)), x)
        else:
            eq1, eq2, ask = re.match(r"Solve (.*) and (.*)\. What is (.*)\?$", p.question).groups()
            eqs = [sympy.Eq(*(_sympy_side(side) for side in eq.split(" = "))) for eq in (eq1, eq2)]
            sol = sympy.solve(eqs, [x, y])
            value = _sympy_side(ask).subs(sol)
        assert Fraction(str(value)) == as_fraction(normalise_answer(p.answer)), (seed, p)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(min_value=-(10**12), max_value=10**12), st.text(max_size=20)))
def test_any_seed_gives_a_consistent_problem(seed):
    p = generate_problem(seed)
    assert p == generate_problem(seed)
    assert as_fraction(run_snippet(p.code)) == as_fraction(normalise_answer(p.answer))


def test_template_errors_are_clear():
    with pytest.raises(ValueError, match="unknown math template.*nope.*valid templates: multi_step"):
        generate_problem(0, ["nope"])
    with pytest.raises(ValueError, match="empty"):
        check_templates([])
    assert check_templates("fractions") == ("fractions",)
    assert check_templates(None) == tuple(TEMPLATES)


# --- loader ------------------------------------------------------------------------------------------
def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_records(tmp_path):
    path = _jsonl(
        tmp_path / "p.jsonl",
        [
            {"question": "1+1?", "gt_answer": "2", "subject": "Prealgebra"},
            {"question": "half?", "gt_answer": 0.5},
            {"question": "", "gt_answer": "3"},  # dropped
            {"question": "empty answer", "gt_answer": " "},  # dropped
            {"question": "int", "gt_answer": 7},
        ],
    )
    records = load_records(path)
    assert [(r.question, r.answer, r.subject) for r in records] == [
        ("1+1?", "2", "Prealgebra"),
        ("half?", "0.5", ""),
        ("int", "7", ""),
    ]
    assert load_records(path) is records  # cached
    custom = _jsonl(tmp_path / "c.jsonl", [{"problem": "q", "solution": "4"}])
    assert load_records(custom, "problem", "solution")[0].answer == "4"


def test_loader_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_records(missing)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "gt_answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=re.escape(f"{bad}:2")):
        load_records(bad)
    nokey = _jsonl(tmp_path / "nokey.jsonl", [{"question": "q"}])
    with pytest.raises(ValueError, match=r"\['question'\] match no known math data format"):
        load_records(nokey)
    later = _jsonl(tmp_path / "later.jsonl", [{"question": "q", "gt_answer": "1"}, {"question": "r"}])
    with pytest.raises(ValueError, match=re.escape(f"{later}:2: missing key(s) ['gt_answer']")):
        load_records(later)
    other = tmp_path / "x.csv"
    other.write_text("question,gt_answer\n")
    with pytest.raises(ValueError, match="unsupported"):
        load_records(other)
    empty = _jsonl(tmp_path / "empty.jsonl", [{"question": "", "gt_answer": ""}])
    with pytest.raises(ValueError, match="no record"):
        load_records(empty)


def test_parquet_records(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"question": ["a?", "b?"], "gt_answer": ["1", "\\frac12"], "level": [1, 2]}), path)
    assert [(r.question, r.answer) for r in load_records(path)] == [("a?", "1"), ("b?", "\\frac12")]
    with pytest.raises(ValueError, match="missing column.*answer"):
        load_records(path, answer_key="answer")


def test_math_file():
    if not MATH_FILE.exists():
        pytest.skip(f"MATH data not found at {MATH_FILE}")
    records = load_records(MATH_FILE)
    assert len(records) == 8521  # two of the 8,523 rows have an empty gt_answer
    assert records[0].answer == "118" and records[0].subject == "Intermediate Algebra"
    assert {r.subject for r in records} == {
        "Algebra", "Intermediate Algebra", "Prealgebra", "Geometry", "Number Theory",
        "Counting & Probability", "Precalculus",
    }


@given(st.integers(min_value=0, max_value=3000), st.floats(min_value=0.0, max_value=0.9), st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_split_is_a_deterministic_partition(n, fraction, seed):
    train = split_indices(n, "train", fraction, seed)
    val = split_indices(n, "val", fraction, seed)
    assert sorted(train + val) == list(range(n))
    assert not set(train) & set(val)
    assert val == split_indices(n, "val", fraction, seed)
    if n > 1 and fraction > 0:
        assert 1 <= len(val) <= n - 1
    assert split_indices(n, "all", fraction, seed) == list(range(n))


def test_split_sizes_and_errors():
    assert len(split_indices(1000, "val", 0.1, 0)) == 100
    assert split_indices(1000, "val", 0.1, 0) != split_indices(1000, "val", 0.1, 1)
    with pytest.raises(ValueError, match="split='test'.*train, val, all"):
        split_indices(10, "test")
    with pytest.raises(ValueError, match="val_fraction"):
        split_indices(10, "val", 1.0)
