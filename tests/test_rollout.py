"""Rollout backends and the multi-turn driver on the micro model."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.policy import response_token_stats
from rlvr.agents.rollout.base import SamplingParams, collate, truncate_at_stop
from rlvr.agents.rollout.hf import HFBackend, filter_logits
from rlvr.agents.rollout.multiturn import run_episodes
from rlvr.envs import make_env
from rlvr.envs.registry import env_spec
from rlvr.envs.searchqa.reward import INVALID_ACTION_MESSAGE
from rlvr.models import load_model

from _rlvr_toys import OBS, LetterEnv, ScriptedBackend, ToolEnv

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def micro():
    return load_model("micro", seed=1)


def _ctx(tok, texts, g=2):
    return [tok(t)["input_ids"] for t in texts for _ in range(g)]


def test_same_seed_same_samples_and_budgets(micro):
    model, tok = micro
    backend = HFBackend(model, tok)
    ctx = _ctx(tok, ["hello", "a longer prompt here"])
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=50)
    a = backend.generate(ctx, sp, seed=5, max_new_tokens=[12, 3, 0, 12])
    b = backend.generate(ctx, sp, seed=5, max_new_tokens=[12, 3, 0, 12])
    c = backend.generate(ctx, sp, seed=6, max_new_tokens=[12, 3, 0, 12])
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert a.token_ids != c.token_ids
    assert len(a.token_ids[1]) <= 3 and a.token_ids[2] == [] and a.finish_reasons[2] == "length"
    for ids, reason in zip(a.token_ids, a.finish_reasons):
        assert reason in ("eos", "length")
        if reason == "eos":
            assert ids[-1] == tok.eos_token_id


def test_rollout_logprobs_match_policy(micro):
    """The sampler's log-probs are those the trainer recomputes (same distribution)."""
    model, tok = micro
    ctx = _ctx(tok, ["abc", "some other prompt"], g=1)
    sp = SamplingParams(max_new_tokens=10, temperature=0.8)
    gen = HFBackend(model, tok).generate(ctx, sp, seed=0)
    batch = collate(
        ctx,
        gen.token_ids,
        [[1] * len(t) for t in gen.token_ids],
        gen.logprobs,
        gen.finish_reasons,
        tok.pad_token_id,
    )
    with torch.no_grad():
        stats = response_token_stats(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.n_response,
            temperature=0.8,
            chunk_size=3,
        )
    m = batch.response_mask.bool()
    torch.testing.assert_close(stats.logprobs[m], batch.rollout_logprobs[m], atol=1e-4, rtol=1e-4)


def test_greedy_matches_generate(micro):
    model, tok = micro
    ctx = _ctx(tok, ["greedy test"], g=1)
    gen = HFBackend(model, tok).generate(
        ctx, SamplingParams(max_new_tokens=8, temperature=0), seed=0
    )
    ids = torch.tensor(ctx)
    ref = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False
    )
    expect = ref[0, ids.shape[1] :].tolist()
    if tok.eos_token_id in expect:
        expect = expect[: expect.index(tok.eos_token_id) + 1]
    assert gen.token_ids[0] == expect


def test_filter_logits_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    k = filter_logits(logits, top_k=2, top_p=1.0)
    assert torch.isinf(k[0, 2:]).all() and torch.isfinite(k[0, :2]).all()
    p = filter_logits(logits, top_k=0, top_p=0.7)  # 0.5 + 0.3 reaches 0.7
    assert torch.isfinite(p[0, :2]).all() and torch.isinf(p[0, 2:]).all()
    one = filter_logits(logits, top_k=0, top_p=0.1)
    assert torch.isfinite(one[0, 0]) and torch.isinf(one[0, 1:]).all()


class _Script:
    """A forward hook that makes the model emit ``text`` token by token, then eos."""

    def __init__(self, model, tok, text, prompt_len):
        self.ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        self.prompt_len = prompt_len
        self.handle = model.register_forward_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs, output):
        pos = kwargs["position_ids"][:, -1]
        k = (pos - self.prompt_len + 1).clamp(0, len(self.ids) - 1)
        forced = torch.tensor(self.ids)[k]
        output.logits[:, -1] = -1e4
        output.logits[torch.arange(len(k)), -1, forced] = 1e4
        return output


@pytest.mark.parametrize(
    "stop,text,reason",
    [
        (("</answer>",), "ab <answer> x </answer> tail", "stop"),
        (("</search>", "</answer>"), "<search> q </search> more </answer>", "stop"),
        (("</answer>",), "no stop here", "eos"),
    ],
)
def test_stop_strings(micro, stop, text, reason):
    model, tok = micro
    ctx = [tok("prompt: ")["input_ids"]] * 2
    script = _Script(model, tok, text, len(ctx[0]))
    try:
        gen = HFBackend(model, tok).generate(
            ctx, SamplingParams(max_new_tokens=60, stop=stop), seed=0
        )
    finally:
        script.handle.remove()
    expected, _ = truncate_at_stop(text, stop)
    assert gen.texts == [expected] * 2
    assert gen.finish_reasons == [reason] * 2
    n = len(tok(expected, add_special_tokens=False)["input_ids"])
    assert len(gen.token_ids[0]) == (n if reason == "stop" else n + 1)


def test_truncate_at_stop_earliest():
    assert truncate_at_stop("x </b> y </a>", ("</a>", "</b>")) == ("x </b>", True)
    assert truncate_at_stop("none", ("</a>",)) == ("none", False)


def test_sampling_params_validation():
    for kwargs, name in (
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
    ):
        with pytest.raises(ValueError, match=name):
            SamplingParams(**kwargs)


def test_multiturn_observation_tokens_have_loss_mask_zero(micro):
    _, tok = micro
    turn = "<search> who </search>"
    backend = ScriptedBackend(tok, [turn])
    envs = [ToolEnv(turns=3) for _ in range(2)]
    prompts = [e.reset(seed=0)[0] for e in envs]
    eps = run_episodes(
        backend,
        tok,
        envs,
        prompts,
        SamplingParams(max_new_tokens=40),
        max_response_tokens=500,
        seed=0,
    )
    t_ids = tok(turn, add_special_tokens=False)["input_ids"]
    o_ids = tok(OBS, add_special_tokens=False)["input_ids"]
    for ep, env in zip(eps, envs):
        assert ep.turns == 3 and env.seen == [turn] * 3
        assert ep.response_ids == t_ids + o_ids + t_ids + o_ids + t_ids
        assert ep.loss_mask == [1] * len(t_ids) + [0] * len(o_ids) + [1] * len(t_ids) + [0] * len(
            o_ids
        ) + [1] * len(t_ids)
        assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.loss_mask) if m == 0)
    # the second turn's context is prompt + turn 1 + observation
    assert backend.calls[1][0] == eps[0].prompt_ids + t_ids + o_ids
    batch = collate(
        [e.prompt_ids for e in eps],
        [e.response_ids for e in eps],
        [e.loss_mask for e in eps],
        [e.logprobs for e in eps],
        [e.finish_reason for e in eps],
        tok.pad_token_id,
    )
    assert batch.response_mask[0].tolist() == [float(m) for m in eps[0].loss_mask]


def test_multiturn_budget_truncates_observation(micro):
    _, tok = micro
    turn = "<search> q </search>"
    n_turn = len(tok(turn, add_special_tokens=False)["input_ids"])
    budget = n_turn + 5
    envs = [ToolEnv(turns=5)]
    prompts = [envs[0].reset(seed=0)[0]]
    eps = run_episodes(
        ScriptedBackend(tok, [turn]),
        tok,
        envs,
        prompts,
        SamplingParams(max_new_tokens=64),
        max_response_tokens=budget,
        seed=0,
    )
    ep = eps[0]
    assert len(ep.response_ids) == budget and ep.turns == 1 and ep.finish_reason == "length"
    assert ep.loss_mask == [1] * n_turn + [0] * 5


def test_multiturn_with_hf_backend_and_errors(micro):
    model, tok = micro
    envs = [ToolEnv(turns=2), ToolEnv(turns=2), LetterEnv(fail_on=0), LetterEnv()]
    prompts = [e.reset(seed=0, options={"index": i % 2})[0] for i, e in enumerate(envs)]
    eps = run_episodes(
        HFBackend(model, tok),
        tok,
        envs,
        prompts,
        SamplingParams(max_new_tokens=8),
        max_response_tokens=200,
        seed=3,
        error_reward=-7.0,
    )
    o_ids = tok(OBS, add_special_tokens=False)["input_ids"]
    for ep in eps[:2]:
        assert ep.turns == 2
        n1 = len(ep.response_ids) - sum(ep.loss_mask) - len(o_ids)
        assert n1 == 0  # exactly one observation, all of it masked
    assert eps[2].error and "verifier crashed" in eps[2].error and eps[2].reward == -7.0
    assert eps[3].error is None and eps[3].turns == 1


def test_vllm_backend_import_error_names_extra():
    pytest.importorskip("transformers")
    try:
        import vllm  # noqa: F401
    except ImportError:
        from rlvr.agents.rollout.vllm import VLLMBackend

        with pytest.raises(ImportError, match=r"rlvr\[gpu\]"):
            VLLMBackend(model_path="x", tokenizer=None)
    else:
        pytest.skip("vllm is installed")


def test_tool_calls_are_counted_in_the_policy_turns_not_the_observations(micro):
    """Search QA answers an invalid action with a message that quotes ``<search> and
    </search>``: counted over ``response_text`` (turns and observations) every episode of a
    model that never searches would count as searching (SmolLM2's tool use read 1.0 so)."""
    _, tok = micro
    turns = ["I do not know.", "Still nothing.", "<answer> x </answer>"]
    envs = [make_env("searchqa", "test", dataset="synthetic", template="plain", max_turns=4)]
    prompts = [envs[0].reset(seed=0, options={"index": 0})[0]]
    ep = run_episodes(
        ScriptedBackend(tok, turns),
        tok,
        envs,
        prompts,
        SamplingParams(max_new_tokens=40),
        max_response_tokens=1000,
        seed=0,
    )[0]
    spec = env_spec("searchqa")
    assert ep.turns == 3 and ep.turn_texts == turns
    assert INVALID_ACTION_MESSAGE in ep.response_text and spec.tool_calls(ep.response_text) == 2
    assert sum(map(spec.tool_calls, ep.turn_texts)) == 0


def test_every_backend_cuts_row_budgets_the_same_way():
    """One place clips the generation budget (``SamplingParams.budgets``): each row's own bound,
    never above the params' and never below 0."""
    sp = SamplingParams(max_new_tokens=8)
    assert sp.budgets(3) == [8, 8, 8]
    assert sp.budgets(3, [12, 3, -1]) == [8, 3, 0]
    with pytest.raises(ValueError, match="one entry per context"):
        sp.budgets(2, [1])
