"""Each sampler parameter against Hugging Face's own logits processor (where HF has
one), batched with rows that use other parameters or none."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

from augserve.engine.logits_processors import SampleContext, apply_processors, needs_processing
from augserve.engine.sampler import Sampler, logprobs_of
from augserve.engine.sampling_params import SamplingParams

VOCAB = 64


def _logits(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _ids(n: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, length), generator=torch.Generator().manual_seed(seed))


def test_no_processor_is_free_and_leaves_logits_alone() -> None:
    ctxs = [None, SampleContext(SamplingParams(), [1, 2], [2], (1,))]
    assert not needs_processing(ctxs)  # min_tokens 0, no bias, no penalty: nothing to do


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.0])
def test_repetition_penalty_matches_hf(penalty: float) -> None:
    logits = _logits(3)
    ids = _ids(3, 10, seed=1)
    ours = logits.clone()
    ctxs = [
        SampleContext(SamplingParams(repetition_penalty=penalty), ids[0].tolist()),
        None,  # an unconstrained row in the same batch
        SampleContext(SamplingParams(repetition_penalty=penalty), ids[2].tolist()),
    ]
    apply_processors(ours, ctxs)
    ref = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
    torch.testing.assert_close(ours[0], ref[0])
    torch.testing.assert_close(ours[2], ref[2])
    torch.testing.assert_close(ours[1], logits[1])  # untouched
    assert not torch.equal(ours[0], logits[0])


def test_min_tokens_matches_hf_and_stops_after() -> None:
    logits = _logits(2)
    prompt = _ids(2, 4, seed=2)
    out3 = _ids(2, 3, seed=3)
    input_ids = torch.cat([prompt, out3], dim=1)
    params = SamplingParams(min_tokens=5, max_tokens=10)
    ctxs = [SampleContext(params, input_ids[r].tolist(), out3[r].tolist(), (1, 7)) for r in (0, 1)]
    ours = logits.clone()
    apply_processors(ours, ctxs)
    hf = MinNewTokensLengthLogitsProcessor(4, 5, [1, 7])(input_ids, logits.clone())
    torch.testing.assert_close(ours, hf)
    assert torch.isneginf(ours[:, [1, 7]]).all()
    done = [SampleContext(params, list(range(9)), list(range(5)), (1, 7))]  # 5 generated
    assert not needs_processing(done)


def test_logit_bias_matches_hf_sequence_bias() -> None:
    logits = _logits(2)
    bias = {3: 5.0, 10: -100.0, 63: 0.5}
    ours = logits.clone()
    apply_processors(ours, [SampleContext(SamplingParams(logit_bias=bias)), None])
    hf = SequenceBiasLogitsProcessor({(t,): b for t, b in bias.items()})
    ref = hf(torch.zeros((2, 1), dtype=torch.long), logits.clone())
    torch.testing.assert_close(ours[0], ref[0])
    torch.testing.assert_close(ours[1], logits[1])
    toks = Sampler()(ours, [SamplingParams(temperature=0.0)] * 2)
    assert toks[0] != 10


def test_presence_and_frequency_penalties_follow_openai() -> None:
    """OpenAI: mu[j] -= c[j] * frequency + (c[j] > 0) * presence, counts over the output."""
    logits = _logits(2)
    out = [4, 4, 4, 9, 20]
    prompt = [30, 31, 4]  # the prompt does not count
    ours = logits.clone()
    p = SamplingParams(presence_penalty=0.5, frequency_penalty=-0.3)
    apply_processors(ours, [SampleContext(p, prompt + out, out), None])
    ref = logits[0].clone()
    for j in set(out):
        c = out.count(j)
        ref[j] -= c * -0.3 + 0.5
    torch.testing.assert_close(ours[0], ref)
    torch.testing.assert_close(ours[1], logits[1])


@pytest.mark.parametrize("min_p", [0.05, 0.2, 0.6])
def test_min_p_matches_hf(min_p: float) -> None:
    logits = _logits(4, seed=5)
    temp = 0.8
    hf = MinPLogitsWarper(min_p)(torch.zeros((4, 1), dtype=torch.long), logits.clone() / temp)
    allowed = [set(torch.nonzero(~torch.isneginf(hf[r])).flatten().tolist()) for r in range(4)]
    s = Sampler()
    params = [SamplingParams(temperature=temp, min_p=min_p, seed=k) for k in range(4)]
    seen: list[set[int]] = [set() for _ in range(4)]
    for pos in range(300):
        for r, t in enumerate(s(logits.clone(), params, [pos] * 4)):
            seen[r].add(t)
    for r in range(4):
        assert seen[r] <= allowed[r]
    assert any(len(a) > 1 for a in allowed)
    assert any(len(x) > 1 for x in seen)  # it still samples, within the set


def test_logprobs_are_raw_log_softmax_with_top_k() -> None:
    logits = _logits(3)
    lps = logprobs_of(logits, [5, 6, 7], [0, 3, 1])
    ref = logits.log_softmax(-1)
    for r, tok in enumerate([5, 6, 7]):
        assert lps[r].token_id == tok
        assert lps[r].logprob == pytest.approx(float(ref[r, tok]), abs=1e-5)
    assert lps[0].top == ()
    top = ref[1].topk(3)
    assert [t for t, _ in lps[1].top] == top.indices.tolist()
    assert [v for _, v in lps[1].top] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_params_refuse_bad_values_by_name() -> None:
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=6, max_tokens=4)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=0.0)
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(min_p=1.5)
    with pytest.raises(ValueError, match="presence_penalty"):
        SamplingParams(presence_penalty=3.0)
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias={-1: 1.0})
    assert SamplingParams(logit_bias={5: 1, 2: -1.0}).logit_bias == ((2, -1.0), (5, 1.0))
