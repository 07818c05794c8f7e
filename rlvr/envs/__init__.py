"""Gymnasium environments with verifiable rewards, and their registry.

``import rlvr`` registers them; ``gymnasium.make("rlvr/KnightsKnaves-v0", n_people=3)`` etc.
Each registration below is everything the rest of rlvr knows about an environment
(``rlvr.envs.registry.EnvSpec``); its callables are ``"module:attr"`` strings, so importing one
environment never imports another.
"""

from __future__ import annotations

from rlvr.envs.base import AnyText, Score, SingleTurnEnv, Tool, coerce_text
from rlvr.envs.registry import (
    ENVS,
    EnvSpec,
    VerlService,
    VerlSpec,
    env_accepts,
    env_names,
    env_spec,
    lift_env_keys,
    load,
    make_env,
    register_env,
    require_env,
    reset_tasks,
)

SEARCH = Tool(
    name="search",
    argument="query",
    template="<search> {} </search>",
    description="Search the knowledge base (titled passages) for a query.",
    argument_doc="What to look up, as a short search-engine query.",
    returns="The best matching passages inside <information>, one per line as "
    '"Doc i(Title: title) text".',
)

#: Search-R1's retrieval service, which run.sh serves with ``rlvr retrieval-serve`` over an index.
RETRIEVAL = VerlService(
    what="Search QA: the retrieval service (Search-R1's POST /retrieve)",
    url_key="retrieval_url",
    serve='retrieval-serve --index "$RLVR_INDEX" --host {host} --port {port} --topk {topk}',
    url_var="RLVR_RETRIEVAL_URL",
    source_var="RLVR_INDEX",
    source_help="a folder written by rlvr index (e5 over wiki-18)",
    wait_var="RLVR_RETRIEVAL_WAIT_S",
)

#: Search-R1 names its parquet data sources after the QA sets
#: (``scripts/data_process/qa_search_*.py``).
SEARCH_R1_SOURCES = (
    *"nq triviaqa popqa hotpotqa 2wikimultihopqa musique bamboogle".split(),
    *("searchR1_nq", "searchR1_hotpotqa"),
)


def register_all() -> None:
    """Register the built-in environments (idempotent)."""
    register_env(
        EnvSpec(
            name="kk",
            id="rlvr/KnightsKnaves-v0",
            title="Knights & Knaves",
            entry_point="rlvr.envs.kk.env:KnightsKnavesEnv",
            scorer="rlvr.envs.kk.reward:score",
            min_reward=-3.0,  # format -1 + answer -2 (docs/design.md §4)
            group_key="n_people",
            record_keys=("n_people",),
            prompt_keys=("template", "system_prompt", "prefill_think", "answer_prefill"),
            options={"prefilled_think": bool, "answer_prefill": str},
            row_options="rlvr.envs.kk.reward:row_options",
            gold="rlvr.envs.kk.reward:gold_text",
            traces="rlvr.envs.kk.traces:KK",
            verl=VerlSpec(
                ability="logic",
                defaults={"prefilled_think": True},  # Logic-RL's prompts end with <think>
                data_sources=("kk_logic", "knights-and-knaves", "K-and-K/knights-and-knaves"),
            ),
        )
    )
    register_env(
        EnvSpec(
            name="math",
            id="rlvr/Math-v0",
            entry_point="rlvr.envs.math.env:MathEnv",
            scorer="rlvr.envs.math.reward:score",
            min_reward=0.0,
            group_key="difficulty",
            record_keys=("difficulty",),
            prompt_keys=("template", "system_prompt", "prefill"),
            batch_scorer="rlvr.envs.math.reward:score_batch",  # the verifier pool
            options={"require_think": bool, "answer_form": str, "timeout_s": float, "prefill": str},
            row_options="rlvr.envs.math.reward:row_options",
            gold="rlvr.envs.math.reward:gold_of",
            traces="rlvr.envs.math.traces:MATH",
            verl=VerlSpec(
                ability="math",
                data_sources=(  # DeepScaleR's and verl's example math sets
                    *("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval"),
                    *("HuggingFaceH4/MATH-500", "openai/gsm8k", "aime24", "amc23"),
                    *("agentica-org/DeepScaleR-Preview-Dataset", "deepscaler"),
                ),
            ),
        )
    )
    register_env(
        EnvSpec(
            name="digits",
            id="rlvr/Digits-v0",
            title="digit sums",
            # graded: a random model's groups have reward variance (the quick paths train on it)
            entry_point="rlvr.envs.digits.env:DigitsEnv",
            scorer="rlvr.envs.digits.reward:score",
            min_reward=0.0,
            group_key="n_digits",
            record_keys=("n_digits",),
            prompt_keys=("template", "system_prompt"),
            verl=VerlSpec(ability="arithmetic"),  # no tiny base (traces): trained from micro
        )
    )
    register_env(
        EnvSpec(
            name="searchqa",
            id="rlvr/SearchQA-v0",
            title="search QA",
            entry_point="rlvr.envs.searchqa.env:SearchQAEnv",
            scorer="rlvr.envs.searchqa.reward:score",
            min_reward=0.0,
            multi_turn=True,
            tools=(SEARCH,),
            stop=("</search>", "</answer>"),
            record_keys=("hops",),
            answer_metrics=("em", "f1"),
            gold="rlvr.envs.searchqa.reward:gold_answers",
            traces="rlvr.envs.searchqa.traces:SEARCHQA",
            verl=VerlSpec(
                ability="qa",
                gold="rlvr.envs.searchqa.reward:search_r1_gold",
                info_keys=("question",),
                agent_loop="rlvr_searchqa",
                section="rlvr.envs.searchqa.verl_spec:section",
                section_keys={  # the agent loop's settings -> search QA's keyword arguments
                    "retrieval_url": "retriever",
                    "max_turns": "max_turns",
                    "topk": "topk",
                    "max_obs_chars": "max_obs_chars",
                },
                task="rlvr.envs.searchqa.verl_spec:task",
                service=RETRIEVAL,
                data_sources=SEARCH_R1_SOURCES,
                export_kwargs="rlvr.envs.searchqa.env:export_kwargs",
            ),
        )
    )
    register_env(
        EnvSpec(
            name="custom",
            id="rlvr/Custom-v0",
            title="custom task",
            entry_point="rlvr.envs.custom.env:CustomTaskEnv",
            scorer="rlvr.envs.custom.rewards:score",
            batch_scorer="rlvr.envs.custom.rewards:score_batch",  # one call per function
            min_reward=0.0,  # unknown in general: error_reward= sets what a crash scores
            prompt_keys=("template", "system_prompt", "prefill"),
            options={
                "reward": "rlvr.envs.custom.rewards:parse_refs",
                "reward_weights": "rlvr.envs.custom.rewards:parse_weights",
                "correct_at": float,
                "prefill": str,
            },
            row_options="rlvr.envs.custom.rewards:row_options",
            setting_groups=(("reward", "reward_weights", "correct_at"),),
            top_level_keys=("dataset", "reward", "reward_weights"),
            verl=VerlSpec(ability="custom", gold="rlvr.envs.custom.rewards:gold_json"),
        )
    )


__all__ = [
    "AnyText",
    "ENVS",
    "EnvSpec",
    "Score",
    "SingleTurnEnv",
    "Tool",
    "VerlService",
    "VerlSpec",
    "coerce_text",
    "env_accepts",
    "env_names",
    "env_spec",
    "lift_env_keys",
    "load",
    "make_env",
    "register_all",
    "register_env",
    "require_env",
    "reset_tasks",
]
