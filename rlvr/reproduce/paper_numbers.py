"""The paper's reported numbers (docs/design.md §6), shown beside ours in every table and the
report.

K&K: average accuracy over the 3-7-people test sets. QA: exact match in points, averaged over the
seven sets. Math: the average gain of GRPO-SG over GRPO in points. AR-Lopti's own K&K numbers
(GRPO -> AR+Lopti) are the closest published anchor for the AR and Lopti rows.
"""

from __future__ import annotations

KK_AVG_ACCURACY = {
    "Qwen2.5-3B-Instruct": {"grpo": 0.42, "grpo_sg": 0.63},
    "Qwen2.5-7B-Instruct-1M": {"grpo": 0.75, "grpo_sg": 0.91},
}
AR_LOPTI_KK = {
    "Qwen2.5-3B-Instruct": {"grpo": 0.39, "ar+lopti": 0.57},
    "Qwen2.5-7B-Instruct-1M": {"grpo": 0.77, "ar+lopti": 0.91},
}
QA_EM_POINTS = {"Qwen2.5-3B": {"grpo": 13.84, "grpo_sg": 27.29}}
MATH_GAIN_POINTS = {"range": (2.7, 6.0), "Qwen2.5-7B (DSR)": 6.0}


def kk_lines() -> list[str]:
    lines = [
        f"- {m}: GRPO {v['grpo']:.2f} -> GRPO-SG {v['grpo_sg']:.2f}"
        for m, v in KK_AVG_ACCURACY.items()
    ]
    lines += [
        f"- AR-Lopti paper, {m}: GRPO {v['grpo']:.2f} -> AR+Lopti {v['ar+lopti']:.2f}"
        for m, v in AR_LOPTI_KK.items()
    ]
    return lines


def qa_lines() -> list[str]:
    return [
        f"- {m}: average EM GRPO {v['grpo']:.2f} -> GRPO-SG {v['grpo_sg']:.2f} (points)"
        for m, v in QA_EM_POINTS.items()
    ]


def math_lines() -> list[str]:
    lo, hi = MATH_GAIN_POINTS["range"]
    return [
        f"- average gain of GRPO-SG over GRPO: +{lo} to +{hi} points "
        f"(+{MATH_GAIN_POINTS['Qwen2.5-7B (DSR)']} for Qwen2.5-7B on DSR)"
    ]
