"""Generated arithmetic and algebra word problems with exact answers and scripted solutions.

Every problem is a pure function of its seed: :func:`generate_problem` draws a template and the
numbers from ``random.Random`` seeded with a string (stable across runs and python versions).
Each problem carries its exact answer (LaTeX: ``8``, ``-\\frac{5}{4}``), a short python snippet
that prints the answer (what the expert runs as its tool call), and a one-line plan (the expert's
thought). Numbers are kept small and questions short: a tiny model reads them.

Templates (``task_type`` in brackets):

- ``multi_step`` [arithmetic]: ``Compute (12 + 7) * 3 - 45 / 9.`` (every division is exact);
- ``fractions`` [arithmetic]: ``Compute 3/4 + 5/6 - 1/3.`` (answer a reduced fraction);
- ``percentages`` [arithmetic]: ``What is 35% of 240?``, discounts and increases;
- ``linear_equation`` [algebra]: ``Solve for x: 7x - 12 = 3x + 20.``;
- ``linear_system`` [algebra]: two equations in x and y, asking for x, y or x + y;
- ``word_problem`` [arithmetic]: shopping change, distance, equal sharing, ages.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

NAMES = ("Mia", "Tom", "Ana", "Leo", "Sara", "Ben", "Nora", "Omar", "Lily", "Sam")


@dataclass(frozen=True)
class Problem:
    """One generated task.

    Attributes:
        question: the problem statement shown to the policy.
        answer: the exact answer in LaTeX (an integer, or ``\\frac{p}{q}`` with sign).
        code: a python snippet that prints the answer (no imports beyond ``fractions``).
        plan: one sentence, the expert's thought before running the code.
        template: the template name.
        task_type: ``arithmetic`` or ``algebra``.
    """

    question: str
    answer: str
    code: str
    plan: str
    template: str
    task_type: str


def latex_number(value: Fraction | int) -> str:
    """``8``, ``-3`` or ``\\frac{5}{4}`` / ``-\\frac{5}{4}`` for an exact rational."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _signed(value: int) -> str:
    """`` + 5`` or `` - 5`` to append a term."""
    return f" - {-value}" if value < 0 else f" + {value}"


def _term(coef: int, var: str, first: bool) -> str:
    """A linear term as written in an equation: ``3x``, ``-x``, `` + 2y``, `` - y``."""
    mag = "" if abs(coef) == 1 else str(abs(coef))
    if first:
        return f"{'-' if coef < 0 else ''}{mag}{var}"
    return f" {'-' if coef < 0 else '+'} {mag}{var}"


def _paren(value: int) -> str:
    return f"({value})" if value < 0 else str(value)


# --- templates -----------------------------------------------------------------------------------
def _multi_step(rng: random.Random) -> Problem:
    a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 9)
    e = rng.randint(2, 9)
    d = e * rng.randint(2, 12)
    form = rng.randrange(3)
    if form == 0:
        text, code = f"({a} + {b}) * {c} - {d} / {e}", f"({a} + {b}) * {c} - {d} // {e}"
        value = (a + b) * c - d // e
    elif form == 1:
        text, code = f"{a} * {c} + {d} / {e} - {b}", f"{a} * {c} + {d} // {e} - {b}"
        value = a * c + d // e - b
    else:
        text, code = f"{d} / {e} * {c} - ({a} - {b})", f"{d} // {e} * {c} - ({a} - {b})"
        value = d // e * c - (a - b)
    return Problem(
        question=f"Compute {text}.",
        answer=latex_number(value),
        code=f"print({code})",
        plan="Evaluate the expression with Python.",
        template="multi_step",
        task_type="arithmetic",
    )


def _fractions(rng: random.Random) -> Problem:
    n_terms = rng.choice((2, 3))
    terms = []
    for _ in range(n_terms):
        den = rng.randint(2, 9)
        terms.append(Fraction(rng.randint(1, den - 1), den))
    written = [(t.numerator, t.denominator) for t in terms]
    ops = [rng.choice("+-") for _ in range(n_terms - 1)]
    value = terms[0]
    text = f"{written[0][0]}/{written[0][1]}"
    code = f"F({written[0][0]}, {written[0][1]})"
    for op, term, (num, den) in zip(ops, terms[1:], written[1:]):
        value = value + term if op == "+" else value - term
        text += f" {op} {num}/{den}"
        code += f" {op} F({num}, {den})"
    return Problem(
        question=f"Compute {text}. Give the answer as a reduced fraction.",
        answer=latex_number(value),
        code=f"from fractions import Fraction as F\nprint({code})",
        plan="Add the fractions exactly with Fraction.",
        template="fractions",
        task_type="arithmetic",
    )


def _percentages(rng: random.Random) -> Problem:
    base = 20 * rng.randint(1, 30)
    pct = 5 * rng.randint(1, 19)
    form = rng.randrange(3)
    if form == 0:
        question = f"What is {pct}% of {base}?"
        code, value = f"print({base} * {pct} // 100)", base * pct // 100
    elif form == 1:
        question = f"A jacket costs {base} dollars and is discounted by {pct}%. What is the sale price in dollars?"
        code, value = f"print({base} - {base} * {pct} // 100)", base - base * pct // 100
    else:
        question = f"A town of {base} people grows by {pct}%. How many people live there now?"
        code, value = f"print({base} + {base} * {pct} // 100)", base + base * pct // 100
    return Problem(
        question=question,
        answer=latex_number(value),
        code=code,
        plan=f"Take {pct} percent of {base} with Python.",
        template="percentages",
        task_type="arithmetic",
    )


def _linear_equation(rng: random.Random) -> Problem:
    x = rng.randint(-12, 12)
    a = rng.choice([k for k in range(-9, 10) if k not in (0,)])
    c = rng.choice([k for k in range(-9, 10) if k not in (0, a)])
    b = rng.randint(-20, 20)
    d = (a - c) * x + b
    left = _term(a, "x", True) + (_signed(b) if b else "")
    right = _term(c, "x", True) + (_signed(d) if d else "")
    return Problem(
        question=f"Solve for x: {left} = {right}.",
        answer=latex_number(x),
        code=f"from fractions import Fraction as F\nprint(F({d} - {_paren(b)}, {a} - {_paren(c)}))",
        plan="Collect the x terms: x = (d - b) / (a - c).",
        template="linear_equation",
        task_type="algebra",
    )


def _linear_system(rng: random.Random) -> Problem:
    x, y = rng.randint(-9, 9), rng.randint(-9, 9)
    while True:
        a, b, d, e = (rng.choice([k for k in range(-6, 7) if k != 0]) for _ in range(4))
        if a * e - b * d != 0:
            break
    c, f = a * x + b * y, d * x + e * y
    ask = rng.choice(("x", "y", "x + y"))
    eq1 = _term(a, "x", True) + _term(b, "y", False) + f" = {c}"
    eq2 = _term(d, "x", True) + _term(e, "y", False) + f" = {f}"
    value = {"x": x, "y": y, "x + y": x + y}[ask]
    code = (
        "from fractions import Fraction as F\n"
        f"a, b, c = {a}, {b}, {c}\n"
        f"d, e, f = {d}, {e}, {f}\n"
        "det = a * e - b * d\n"
        "x = F(c * e - b * f, det)\n"
        "y = F(a * f - c * d, det)\n"
        f"print({ask})"
    )
    return Problem(
        question=f"Solve {eq1} and {eq2}. What is {ask}?",
        answer=latex_number(value),
        code=code,
        plan="Solve the 2x2 system with Cramer's rule.",
        template="linear_system",
        task_type="algebra",
    )


def _word_problem(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    form = rng.randrange(4)
    if form == 0:
        n1, p1, n2, p2 = rng.randint(2, 6), rng.randint(2, 9), rng.randint(2, 6), rng.randint(2, 9)
        cost = n1 * p1 + n2 * p2
        paid = 10 * ((cost + 9) // 10) + 10 * rng.randint(0, 3)
        question = (
            f"{name} buys {n1} notebooks at {p1} dollars each and {n2} pens at {p2} dollars each, "
            f"paying with {paid} dollars. How much change, in dollars?"
        )
        code, value = f"print({paid} - ({n1} * {p1} + {n2} * {p2}))", paid - cost
    elif form == 1:
        s1, t1, s2, t2 = 10 * rng.randint(3, 9), rng.randint(1, 5), 10 * rng.randint(3, 9), rng.randint(1, 5)
        question = (
            f"A train goes {s1} km per hour for {t1} hours, then {s2} km per hour for {t2} hours. "
            "How many km does it travel?"
        )
        code, value = f"print({s1} * {t1} + {s2} * {t2})", s1 * t1 + s2 * t2
    elif form == 2:
        boxes = rng.randint(2, 9)
        per_box = rng.randint(2, 12)
        per_tray = rng.choice([k for k in range(2, 13) if (boxes * per_box) % k == 0])
        trays = boxes * per_box // per_tray
        question = (
            f"{name} bakes {trays} trays of {per_tray} cookies and packs them equally into {boxes} boxes. "
            "How many cookies go in each box?"
        )
        code, value = f"print({trays} * {per_tray} // {boxes})", per_box
    else:
        kid, k, years = rng.randint(3, 15), rng.randint(2, 5), rng.randint(2, 10)
        total = kid * (k + 1) + 2 * years
        question = (
            f"{name}'s mother is {k} times as old as {name}. In {years} years the sum of their ages "
            f"will be {total}. How old is {name} now?"
        )
        code, value = f"print(({total} - 2 * {years}) // ({k} + 1))", kid
    return Problem(
        question=question,
        answer=latex_number(value),
        code=code,
        plan="Write the arithmetic of the story in Python.",
        template="word_problem",
        task_type="arithmetic",
    )


TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "multi_step": _multi_step,
    "fractions": _fractions,
    "percentages": _percentages,
    "linear_equation": _linear_equation,
    "linear_system": _linear_system,
    "word_problem": _word_problem,
}


def check_templates(templates: Sequence[str] | None) -> tuple[str, ...]:
    """The template names to draw from (all when ``None``); a clear error for unknown names."""
    if templates is None:
        return tuple(TEMPLATES)
    if isinstance(templates, str):
        templates = [templates]
    names = tuple(str(t) for t in templates)
    if not names:
        raise ValueError(f"templates is empty; valid templates: {', '.join(TEMPLATES)}")
    unknown = [t for t in names if t not in TEMPLATES]
    if unknown:
        raise ValueError(f"unknown math template(s) {unknown}; valid templates: {', '.join(TEMPLATES)}")
    return names


def generate_problem(seed: int | str, templates: Sequence[str] | None = None) -> Problem:
    """The problem of ``seed`` (deterministic), drawn from ``templates`` (default: all)."""
    names = check_templates(templates)
    rng = random.Random(f"arl.math_tool/{seed}")
    template = names[rng.randrange(len(names))]
    return TEMPLATES[template](rng)


__all__ = ["NAMES", "TEMPLATES", "Problem", "check_templates", "generate_problem", "latex_number"]
