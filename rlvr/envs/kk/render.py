"""Natural-language rendering of K&K puzzles, and the parser that reads it back.

Grammar of a rendered statement (unambiguous at any depth; compound operands are parenthesised,
as in reasoning-gym's port of mem-kk-logic, so depth > 2 stays readable)::

    expr  := atom
           | "it is not the case that" group
           | group ("and" group)+ | group ("or" group)+
           | "if" group "then" group
           | group "if and only if" group
    group := atom | "(" expr ")"
    atom  := NAME "is" ["not"] "a" ("knight" | "knave")

``("not", leaf)`` renders as the atom "X is not a knight" (it keeps the tree, unlike writing the
complementary role). The first letter of a quoted statement is capitalised.
"""

from __future__ import annotations

import re
from typing import Sequence

from rlvr.envs.kk.logic import KNAVE, KNIGHT, LEAVES, Statement

INTRO = (
    "A very special island is inhabited only by knights and knaves. "
    "Knights always tell the truth, and knaves always lie. "
)
QUESTION = "So who is a knight and who is a knave?"

#: Speech verbs for the statement sentences ``{name} {verb}, "{statement}".``
SPEECH_VERBS = (
    "said",
    "claimed",
    "stated",
    "remarked",
    "declared",
    "asserted",
    "told you",
    "was heard saying",
)

_ROLE_WORD = {KNIGHT: "knight", KNAVE: "knave"}


def _is_atom(s: Statement) -> bool:
    return s[0] in LEAVES or (s[0] == "not" and s[1][0] in LEAVES)


def _render(s: Statement, names: Sequence[str]) -> str:
    op = s[0]
    if op in LEAVES:
        return f"{names[s[1]]} is a {_ROLE_WORD[op]}"
    if op == "not":
        child = s[1]
        if child[0] in LEAVES:
            return f"{names[child[1]]} is not a {_ROLE_WORD[child[0]]}"
        return f"it is not the case that {_group(child, names)}"
    if op in ("and", "or"):
        return f" {op} ".join(_group(c, names) for c in s[1:])
    if op == "->":
        return f"if {_group(s[1], names)} then {_group(s[2], names)}"
    if op == "<=>":
        return f"{_group(s[1], names)} if and only if {_group(s[2], names)}"
    raise ValueError(f"unknown statement operator {op!r}")


def _group(s: Statement, names: Sequence[str]) -> str:
    text = _render(s, names)
    return text if _is_atom(s) else f"({text})"


def render_statement(stmt: Statement, names: Sequence[str]) -> str:
    """One statement as an English clause (first letter capitalised)."""
    text = _render(stmt, names)
    return text[:1].upper() + text[1:]


def join_names(names: Sequence[str]) -> str:
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return ", ".join(names[:-1]) + ", and " + names[-1]


def render_quiz(
    names: Sequence[str], statements: Sequence[Statement], verb_ids: Sequence[int]
) -> str:
    """The whole puzzle text, in the layout of the K&K / Logic-RL quizzes."""
    parts = [INTRO, f"You meet {len(names)} inhabitants: {join_names(names)}."]
    for p, (stmt, v) in enumerate(zip(statements, verb_ids)):
        parts.append(f' {names[p]} {SPEECH_VERBS[v]}, "{render_statement(stmt, names)}".')
    parts.append(" " + QUESTION)
    return "".join(parts)


def solution_text_format(names: Sequence[str], knights: Sequence[bool]) -> str:
    """Logic-RL's answer layout: ``(1) Zoey is a knight\\n(2) ...``."""
    return "\n".join(
        f"({i}) {name} is a {'knight' if k else 'knave'}"
        for i, (name, k) in enumerate(zip(names, knights), 1)
    )


# -- parsing the rendering back ------------------------------------------------------------------
_TOKEN = re.compile(r"\(|\)|[A-Za-z]+")


class RenderParseError(ValueError):
    """The text is not in the grammar of :func:`render_statement`."""


class _Parser:
    def __init__(self, tokens: list[str], index_of: dict[str, int]):
        self.toks, self.i, self.index_of = tokens, 0, index_of

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, *words: str) -> None:
        for w in words:
            if self.peek() != w:
                raise RenderParseError(f"expected {w!r} at token {self.i}, got {self.peek()!r}")
            self.i += 1

    def at(self, *words: str) -> bool:
        return all(self.peek(k) == w for k, w in enumerate(words))

    def expr(self) -> Statement:
        if self.at("if"):
            self.take("if")
            a = self.group()
            self.take("then")
            return ("->", a, self.group())
        if self.at("it", "is", "not", "the", "case", "that"):
            self.take("it", "is", "not", "the", "case", "that")
            return ("not", self.group())
        first = self.group()
        for op in ("and", "or"):
            if self.at(op):
                items = [first]
                while self.at(op):
                    self.take(op)
                    items.append(self.group())
                return (op, *items)
        if self.at("if", "and", "only", "if"):
            self.take("if", "and", "only", "if")
            return ("<=>", first, self.group())
        return first

    def group(self) -> Statement:
        if self.at("("):
            self.take("(")
            e = self.expr()
            self.take(")")
            return e
        return self.atom()

    def atom(self) -> Statement:
        name = self.peek()
        if name not in self.index_of:
            raise RenderParseError(f"expected a name at token {self.i}, got {name!r}")
        self.i += 1
        self.take("is")
        negated = self.at("not")
        if negated:
            self.take("not")
        self.take("a")
        role = self.peek()
        if role not in ("knight", "knave"):
            raise RenderParseError(f"expected knight/knave at token {self.i}, got {role!r}")
        self.i += 1
        leaf = (KNIGHT if role == "knight" else KNAVE, self.index_of[name])
        return ("not", leaf) if negated else leaf


def parse_statement(text: str, names: Sequence[str]) -> Statement:
    """Inverse of :func:`render_statement` for the given names."""
    tokens = _TOKEN.findall(text)
    if tokens and tokens[0] in ("If", "It"):
        tokens[0] = tokens[0].lower()
    parser = _Parser(tokens, {n: i for i, n in enumerate(names)})
    stmt = parser.expr()
    if parser.i != len(tokens):
        raise RenderParseError(f"trailing tokens after statement: {tokens[parser.i :]!r}")
    return stmt


def parse_quiz(quiz: str, names: Sequence[str]) -> tuple[Statement, ...]:
    """Read the statements back from a quiz made by :func:`render_quiz`, ordered by speaker."""
    verbs = "|".join(re.escape(v) for v in SPEECH_VERBS)
    who = "|".join(re.escape(n) for n in names)
    found: dict[str, Statement] = {}
    for m in re.finditer(rf'\b({who}) (?:{verbs}), "([^"]*)"\.', quiz):
        if m.group(1) in found:
            raise RenderParseError(f"{m.group(1)} speaks twice")
        found[m.group(1)] = parse_statement(m.group(2), names)
    missing = [n for n in names if n not in found]
    if missing:
        raise RenderParseError(f"no statement found for {missing}")
    return tuple(found[n] for n in names)
