"""A seeded synthetic knowledge task: fictional entities, passages about them, questions on them.

A world of people, cities and organisations with random attributes (names built from random
syllables, so no pretrained model can know them) is written as one passage per entity. Questions
are single-hop (one passage holds the answer) or two-hop (the answer needs a second search on an
entity named in the first passage). The answer is only in the corpus, so a policy must search.

Same ``seed`` -> same world, corpus, questions and split. Questions are shuffled once with the
seed and the first ``test_fraction`` of them form the test split; every question string is
unique, so a test question never appears in the train stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlvr.envs.searchqa.corpus import Corpus, Passage
from rlvr.envs.searchqa.data import QAItem

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "kr",
    "th",
    "sh",
    "qu",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "x"]
OCCUPATIONS = [
    "glassblower",
    "cartographer",
    "astronomer",
    "botanist",
    "clockmaker",
    "shipwright",
    "violinist",
    "archivist",
    "beekeeper",
    "stonemason",
    "chemist",
    "weaver",
    "lighthouse keeper",
    "engraver",
]
ORG_KINDS = ["Guild", "Company", "Institute", "Society", "Foundry", "Observatory", "Press", "Trust"]


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _syllable(rng: np.random.Generator) -> str:
    return (
        _ONSETS[rng.integers(len(_ONSETS))]
        + _VOWELS[rng.integers(len(_VOWELS))]
        + _CODAS[rng.integers(len(_CODAS))]
    )


def _word(rng: np.random.Generator, lo: int, hi: int) -> str:
    return "".join(_syllable(rng) for _ in range(int(rng.integers(lo, hi + 1)))).capitalize()


def _unique_names(rng: np.random.Generator, n: int, make, taken: set[str]) -> list[str]:
    out = []
    while len(out) < n:
        name = make(rng)
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


@dataclass(frozen=True)
class World:
    people: list[dict]
    cities: list[dict]
    orgs: list[dict]

    def passages(self) -> list[Passage]:
        out = []
        for c in self.cities:
            out.append(
                Passage(
                    f"city-{c['i']}",
                    c["name"],
                    f"{c['name']} is a city in {c['country']}. It was founded in {c['founded']}.",
                )
            )
        for o in self.orgs:
            out.append(
                Passage(
                    f"org-{o['i']}",
                    o["name"],
                    f"{o['name']} is an organisation headquartered in {o['city']}. "
                    f"It was founded in {o['founded']} by {o['founder']}.",
                )
            )
        for p in self.people:
            out.append(
                Passage(
                    f"person-{p['i']}",
                    p["name"],
                    f"{p['name']} was born in {p['born']} in {p['city']}. "
                    f"{p['surname']} works as {_article(p['occupation'])} {p['occupation']} "
                    f"for {p['org']}.",
                )
            )
        return out

    def questions(self) -> list[QAItem]:
        city = {c["name"]: c for c in self.cities}
        org = {o["name"]: o for o in self.orgs}
        qs: list[tuple[str, str, int, str]] = []
        for p in self.people:
            n, c, o = p["name"], city[p["city"]], org[p["org"]]
            qs += [
                (f"In which city was {n} born?", p["city"], 1, n),
                (f"In what year was {n} born?", str(p["born"]), 1, n),
                (f"What is the occupation of {n}?", p["occupation"], 1, n),
                (f"Which organisation does {n} work for?", p["org"], 1, n),
                (f"In which country was {n} born?", c["country"], 2, n),
                (f"In what year was the city where {n} was born founded?", str(c["founded"]), 2, n),
                (
                    f"In which city is the organisation that {n} works for headquartered?",
                    o["city"],
                    2,
                    n,
                ),
                (f"Who founded the organisation that {n} works for?", o["founder"], 2, n),
            ]
        for c in self.cities:
            qs += [
                (f"In which country is {c['name']}?", c["country"], 1, c["name"]),
                (f"In what year was {c['name']} founded?", str(c["founded"]), 1, c["name"]),
            ]
        for o in self.orgs:
            qs += [
                (f"In which city is {o['name']} headquartered?", o["city"], 1, o["name"]),
                (f"Who founded {o['name']}?", o["founder"], 1, o["name"]),
                (
                    f"In which country is {o['name']} headquartered?",
                    city[o["city"]]["country"],
                    2,
                    o["name"],
                ),
            ]
        return [
            QAItem(q, (a,), f"syn-{i}", "synthetic", {"hops": h, "entity": e})
            for i, (q, a, h, e) in enumerate(qs)
        ]


def make_world(
    seed: int = 0, n_people: int = 200, n_cities: int = 40, n_orgs: int = 40, n_countries: int = 10
) -> World:
    """A random world; every name is unique across entity types."""
    for name, v in {
        "n_people": n_people,
        "n_cities": n_cities,
        "n_orgs": n_orgs,
        "n_countries": n_countries,
    }.items():
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    countries = _unique_names(rng, n_countries, lambda r: _word(r, 2, 3), taken)
    city_names = _unique_names(rng, n_cities, lambda r: _word(r, 2, 3), taken)
    cities = [
        {
            "i": i,
            "name": nm,
            "country": countries[rng.integers(n_countries)],
            "founded": int(rng.integers(900, 1900)),
        }
        for i, nm in enumerate(city_names)
    ]
    full = _unique_names(rng, n_people, lambda r: f"{_word(r, 1, 2)} {_word(r, 2, 3)}", taken)
    founders = _unique_names(rng, n_orgs, lambda r: f"{_word(r, 1, 2)} {_word(r, 2, 3)}", taken)
    org_names = _unique_names(
        rng, n_orgs, lambda r: f"{_word(r, 2, 3)} {ORG_KINDS[r.integers(len(ORG_KINDS))]}", taken
    )
    orgs = [
        {
            "i": i,
            "name": nm,
            "city": city_names[rng.integers(n_cities)],
            "founded": int(rng.integers(1700, 2000)),
            "founder": founders[i],
        }
        for i, nm in enumerate(org_names)
    ]
    people = [
        {
            "i": i,
            "name": nm,
            "surname": nm.split()[-1],
            "born": int(rng.integers(1800, 2000)),
            "city": city_names[rng.integers(n_cities)],
            "org": org_names[rng.integers(n_orgs)],
            "occupation": OCCUPATIONS[rng.integers(len(OCCUPATIONS))],
        }
        for i, nm in enumerate(full)
    ]
    return World(people, cities, orgs)


def synthetic_task(
    seed: int = 0, split: str = "train", test_fraction: float = 0.2, **world_kwargs
) -> tuple[Corpus, list[QAItem]]:
    """``(corpus, questions of split)`` for the synthetic knowledge task."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    world = make_world(seed, **world_kwargs)
    questions = world.questions()
    order = np.random.default_rng([seed, 1]).permutation(len(questions))
    n_test = max(1, int(round(test_fraction * len(questions))))
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return Corpus(world.passages()), [questions[i] for i in chosen]


def synthetic_passages(n: int, seed: int = 0) -> tuple[list[Passage], list[str]]:
    """``n`` person passages and, for each, a question naming that person (for benchmarks)."""
    world = make_world(
        seed, n_people=n, n_cities=max(1, n // 50), n_orgs=max(1, n // 50), n_countries=50
    )
    passages = [p for p in world.passages() if p.id.startswith("person-")]
    questions = [f"In which city was {p['name']} born?" for p in world.people]
    return passages, questions
