"""The ORT / ACORT captioner: published sizes, cost model, geometry, cached decoding, search."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest
import torch
from modelcheck import check_against_materialised, random_knobs, random_pattern
from test_radix import boundary_cases

import nas.models.ort as ort_module
from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.models import create_model
from nas.models.decoding import LayerCache, beam_search
from nas.models.ort import BoxGeometry, EncoderLayer, ORTCaptioner, caption_tokens
from nas.presets import PRESETS, get_preset
from nas.radix import UNK, RadixTokenizer, WordTokenizer
from nas.tasks import TaskGeometry, decoder_positions, get_geometry
from studies.export._formats import acort_options
from studies.export._record import TrialRecord
from studies.export.clients import acort_max_seq_length
from trainers.tasks.collate import collate

TINY = TaskGeometry("tiny-captions", "caption", 50, regions=5, region_dim=16, caption_words=6)
ORT_PRESETS = [name for name, keys in PRESETS.items() if keys["family"] == "ort"]


def _tiny_config(**changes: Any) -> ArchConfig:
    keys = {"family": "ort", "d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 2,
            "decoder_layers": 3, **changes}
    return ArchConfig.from_dict(keys)


def _tiny_model(seed: int = 0, **changes: Any) -> ORTCaptioner:
    torch.manual_seed(seed)
    model = create_model(_tiny_config(**changes), TINY)
    assert isinstance(model, ORTCaptioner)
    return model.eval()


def _inputs(model: ORTCaptioner, batch: int, seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return model.example_inputs(batch)


# ---------------------------------------------------------------------- published figures
def test_published_parameter_counts_are_exact() -> None:
    assert estimate_cost(get_preset("ort-base")).params == 55_443_777
    assert estimate_cost(get_preset("acort-base")).params == 14_979_347


def test_ort_base_parts_and_madds_follow_the_hand_count() -> None:
    cost = estimate_cost(get_preset("ort-base"))
    d, ff, r, words, v = 512, 2048, 36, 16, 10_001
    t = 1 + words  # the decoder runs on BOS + the 16-word caption, as training feeds it
    assert t == decoder_positions(get_geometry("coco-captions"))
    enc = 4 * r * d * d + 2 * r * r * d + r * r * 64 * 8 + 2 * r * d * ff
    dec = (4 * t * d * d + 2 * t * t * d) + (2 * t * d * d + 2 * r * d * d + 2 * t * r * d) + (
        2 * t * d * ff
    )
    assert cost.parts["backbone"].madds == 6 * enc + 6 * dec
    assert cost.parts["embedding"].madds == r * 2048 * d
    assert cost.parts["head"].madds == t * d * v
    assert cost.parts["head"].params == d * v + v
    assert cost.parts["embedding"].params == 2048 * d + d + v * d
    # acort-base: radix 768 -> 771 classes; 9,998 words (10,001 with PAD, BOS, EOS) take 2 digits
    acort = estimate_cost(get_preset("acort-base"))
    assert acort.parts["head"].params == d * 771 + 771
    assert acort.parts["head"].madds == (1 + 2 * words) * d * 771


# ---------------------------------------------------------------------- cost model vs real network
@pytest.mark.parametrize("name", ORT_PRESETS)
def test_presets_at_reduced_width_match_materialised(name: str) -> None:
    config = get_preset(name).replace(d_model=64, d_ff=128, heads=4)
    check_against_materialised(config)


def _random_config(rng: random.Random) -> ArchConfig:
    knobs = random_knobs(rng)
    groups = knobs["groups"]
    heads = rng.choice([h for h in (4, 8) if h % groups == 0])
    d = rng.choice((32, 48, 64))
    enc = dec = 2
    sharing = rng.choice(("none", "both", "encoder", "decoder"))
    layer_sharing: dict[str, str] = {}
    if sharing in ("both", "encoder"):
        layer_sharing["encoder"] = random_pattern(rng, enc)
    if sharing in ("both", "decoder"):
        layer_sharing["decoder"] = random_pattern(rng, dec)
    return ArchConfig.from_dict({
        "family": "ort", "d_model": d, "d_ff": rng.choice((2, 4)) * d, "heads": heads,
        "encoder_layers": enc, "decoder_layers": dec, **knobs,
        "layer_sharing": layer_sharing or None,
        "radix_base": rng.choice((None, None, 2, 3, 7, 10, 64)),
    })


@pytest.mark.parametrize("seed", range(50))
def test_random_knobs_match_materialised(seed: int) -> None:
    check_against_materialised(_random_config(random.Random(seed)), TINY, seed=seed)


def test_build_uses_the_tokenizers_special_ids_and_vocabulary() -> None:
    words = [f"w{i}" for i in range(46)] + [UNK]
    radix, word = RadixTokenizer(words, 7), WordTokenizer(words)
    model = _tiny_model(radix_base=7)
    assert (model.pad_id, model.bos_id, model.eos_id) == (radix.PAD, radix.BOS, radix.EOS)
    assert model.vocab_size == radix.vocab_size == 10
    # 47 words (50 outputs with PAD, BOS, EOS) take 2 base-7 digits: 7^2 = 49 >= 47
    assert model.caption_len == 6 * radix.digits == 6 * 2
    model = _tiny_model()
    assert (model.pad_id, model.bos_id, model.eos_id) == (word.PAD, word.BOS, word.EOS)
    assert model.vocab_size == TINY.num_outputs == word.vocab_size


@pytest.mark.parametrize("radix_base", [None, 7])
def test_cost_training_and_generation_run_the_decoder_on_the_same_positions(
        radix_base: int | None) -> None:
    """One convention (``nas.tasks.decoder_positions``): BOS + a full caption. The cost
    geometry (``example_inputs``, which the latency measure runs too), what the trainer's
    collate feeds for a caption of ``caption_words`` words, and the tokens greedy generation
    feeds to produce such a caption and its EOS are all that many positions."""
    words = [f"w{i}" for i in range(46)] + [UNK]
    tokenizer = WordTokenizer(words) if radix_base is None else RadixTokenizer(words, radix_base)
    per_word = 1 if radix_base is None else 2  # 47 words in base 7 take 2 digits
    positions = decoder_positions(TINY, per_word)
    assert positions == 1 + TINY.caption_words * per_word
    model = _tiny_model(radix_base=radix_base)
    assert model.decoder_len == positions
    assert model.example_inputs(2)["tokens"].shape == (2, positions)
    caption = words[:TINY.caption_words]
    item = {"regions": torch.randn(TINY.regions, TINY.region_dim), "boxes": torch.rand(5, 4),
            "caption": caption, "references": [caption]}
    batch = collate("caption", [item], tokenizer)
    assert batch["tokens"].shape == batch["targets"].shape == (1, positions)
    assert batch["tokens"][0, 0] == tokenizer.BOS and batch["targets"][0, -1] == tokenizer.EOS

    fed: list[int] = []
    step = model.decode_step

    def no_early_eos(tokens: torch.Tensor, state: Any) -> torch.Tensor:
        fed.append(state.step)
        logits = step(tokens, state)
        eos = logits[:, model.eos_id].clone()
        if state.step < positions:  # a full-length caption first, then EOS
            logits[:, model.eos_id] = -torch.inf
        else:
            logits.fill_(-torch.inf)[:, model.eos_id] = eos
        return logits

    model.decode_step = no_early_eos  # type: ignore[method-assign]
    inputs = model.example_inputs(1)
    out = model.generate(inputs["regions"], inputs["boxes"])
    assert fed == list(range(positions)) and out.shape == (1, positions)
    assert out[0, -1] == model.eos_id


def test_the_latency_measure_runs_the_decoder_on_the_convention(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure_latency_ms`` times forward passes on BOS + a full caption, like the cost."""
    import nas.models
    import studies.worker as worker

    seen: list[tuple[int, ...]] = []

    def recording_model(*args: Any, **kwargs: Any) -> torch.nn.Module:
        model = create_model(*args, **kwargs)
        model.register_forward_pre_hook(
            lambda m, args, kwargs: seen.append(tuple(kwargs["tokens"].shape)),
            with_kwargs=True)
        return model

    # the worker imports the models when it measures (a trial that trains nothing imports none)
    monkeypatch.setattr(nas.models, "create_model", recording_model)
    config = _tiny_config(radix_base=7)
    assert worker.measure_latency_ms(config, TINY, repeats=2) > 0
    assert seen == [(1, decoder_positions(TINY, 2))] * 3  # warm-up and two timed passes


def _acort_record(config: ArchConfig, task: TaskGeometry) -> TrialRecord:
    return TrialRecord(study="s", number=0, state="complete", status=None, objectives=None,
                       directions={}, arch=config, cost=None, train={}, task=task.name,
                       task_options={}, geometry=task, space_hash=None, seed=None, fidelity=None,
                       epochs_reached=None, checkpoint=None, checkpoint_dir=None,
                       version="0.1.0", git_commit=None)


def test_cost_model_and_export_use_the_tokenizers_digits_at_vocabulary_boundaries() -> None:
    """Over every base whose powers fall at, just below or just above the word count or the
    vocabulary size with specials: the decoder tokens the ORT builder sizes, the head MAdds the
    cost model counts and the ACORT export's --max_seq_length follow the digits the tokenizer
    writes for the same words."""
    words_per_caption, d = 3, 8
    for base, n in boundary_cases():
        words = [f"w{i}" for i in range(n - 1)] + [UNK]
        radix = RadixTokenizer(words, base)
        task = TaskGeometry("boundary", "caption", WordTokenizer(words).vocab_size, regions=2,
                            region_dim=8, caption_words=words_per_caption)
        tokens = len(radix.encode([words[-1]] * words_per_caption, add_special=False))
        assert tokens == words_per_caption * radix.digits
        config = ArchConfig.from_dict({"family": "ort", "d_model": d, "d_ff": 16, "heads": 2,
                                       "encoder_layers": 1, "decoder_layers": 1,
                                       "radix_base": base})
        assert caption_tokens(task, base) == tokens, (base, n)
        model = create_model(config, task, device="meta")
        assert isinstance(model, ORTCaptioner) and model.caption_len == tokens, (base, n)
        opts, _ = acort_options(_acort_record(config, task))
        length = opts[opts.index("--max_seq_length") + 1] if "--max_seq_length" in opts else None
        expected = acort_max_seq_length(decoder_positions(task, radix.digits))
        assert length == str(expected) == str(2 + tokens), (base, n)
    for base, n in boundary_cases()[::9]:  # the traced cost, on a sample (it is slower)
        words = [f"w{i}" for i in range(n - 1)] + [UNK]
        task = TaskGeometry("boundary", "caption", n + 3, regions=2, region_dim=8,
                            caption_words=words_per_caption)
        config = _tiny_config(radix_base=base, d_model=d, d_ff=16, heads=2, encoder_layers=1,
                              decoder_layers=1)
        head = estimate_cost(config, task).parts["head"].madds
        positions = 1 + words_per_caption * RadixTokenizer(words, base).digits  # BOS + caption
        assert head == positions * d * (base + 3)


# ---------------------------------------------------------------------- box geometry
def _reference_geometry(boxes: torch.Tensor, dim: int = 64) -> torch.Tensor:
    """ORT's BoxRelationalEmbedding written pair by pair (widths without the pixel +1)."""
    b, r, _ = boxes.shape
    out = torch.empty(b, r, r, dim)
    freqs = [1000.0 ** (-i / (dim // 8)) for i in range(dim // 8)]
    for i, m, n in itertools.product(range(b), range(r), range(r)):
        x0, y0, x1, y1 = boxes[i, m].tolist()
        u0, v0, u1, v1 = boxes[i, n].tolist()
        wm, hm, wn, hn = x1 - x0, y1 - y0, u1 - u0, v1 - v0
        rel = torch.tensor([
            max(abs((x0 + x1) / 2 - (u0 + u1) / 2) / wm, 1e-3),
            max(abs((y0 + y1) / 2 - (v0 + v1) / 2) / hm, 1e-3),
            wn / wm, hn / hm,
        ]).log()
        angles = torch.stack([100 * rel[c] * f for c in range(4) for f in freqs])
        out[i, m, n] = torch.cat([angles.sin(), angles.cos()])
    return out


def test_box_geometry_matches_the_pairwise_formula() -> None:
    torch.manual_seed(0)
    boxes = _inputs(_tiny_model(), 2)["boxes"].double()
    boxes[0, 1] = boxes[0, 0]  # coincident centres: clamped, not log(0)
    got = BoxGeometry()(boxes)
    assert got.shape == (2, 5, 5, 64)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), _reference_geometry(boxes).float(), atol=2e-3, rtol=0)


def test_box_geometry_is_invariant_to_translation_and_scale() -> None:
    boxes = _inputs(_tiny_model(), 2)["boxes"].double()
    moved = boxes * 3.0 + torch.tensor([5.0, -2.0, 5.0, -2.0], dtype=torch.float64)
    torch.testing.assert_close(BoxGeometry()(moved), BoxGeometry()(boxes), atol=1e-6, rtol=0)


def test_geometry_is_embedded_once_per_forward_even_with_shared_layers() -> None:
    model = _tiny_model(encoder_layers=3, layer_sharing={"encoder": "(0x3)"})
    calls: list[int] = []
    model.encoder.geometry.register_forward_hook(lambda *_: calls.append(1))
    model(**_inputs(model, 2))
    assert len(calls) == 1
    assert sum(p.numel() for p in model.encoder.geometry.parameters()) == 0
    layer = model.encoder.layers.layers[0]
    assert isinstance(layer, EncoderLayer)
    assert sum(p.numel() for p in layer.geometry.parameters()) == 65 * 4  # Linear(64 -> heads)


# ---------------------------------------------------------------------- masks
def test_zero_feature_regions_are_padding() -> None:
    model = _tiny_model()
    inputs = _inputs(model, 2)
    short = {**inputs, "regions": inputs["regions"][:, :3], "boxes": inputs["boxes"][:, :3]}
    padded = dict(inputs)
    padded["regions"] = inputs["regions"].clone()
    padded["regions"][:, 3:] = 0.0
    with torch.no_grad():
        torch.testing.assert_close(model(**padded), model(**short), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(model(**inputs), model(**short), atol=1e-3)


def test_pad_tokens_are_masked_as_keys() -> None:
    model = _tiny_model()
    inputs = _inputs(model, 2)
    inputs["tokens"][:, 2] = model.pad_id
    with torch.no_grad():
        before = model(**inputs)
        model.token_embed.embed.weight[model.pad_id] += torch.randn(32)  # what a PAD key carries
        after = model(**inputs)
    # only the PAD position itself sees the change: no other position attends to it
    torch.testing.assert_close(after[:, [0, 1, 3, 4, 5]], before[:, [0, 1, 3, 4, 5]])
    assert not torch.allclose(after[:, 2], before[:, 2], atol=1e-3)


# ---------------------------------------------------------------------- cached decoding
def _step_logits(
    model: ORTCaptioner, inputs: dict[str, torch.Tensor], caches: str = "per-depth"
) -> torch.Tensor:
    """Logits of decoding ``inputs['tokens']`` one token at a time with a cache.

    ``caches="per-module"`` reproduces the released ACORT decoder: one cache per MODULE, so a
    layer executed at two depths appends both depths' keys to one cache. Padding keys are not
    masked here (all-True mask), as in that code.
    """
    state = model.start_decoding(inputs["regions"], inputs["boxes"])
    if caches == "per-module":
        by_module: dict[int, LayerCache] = {}
        state.caches = [
            by_module.setdefault(id(layer), {"self": {}, "cross": {}})
            for _, layer in model.decoder.layers.executed()
        ]
    tokens = inputs["tokens"]
    out = []
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            if caches == "per-module":
                x = model.token_embed(tokens[:, t : t + 1], start=t)
                everything = torch.ones(1, 1, 1, 1, dtype=torch.bool)
                x = model.decoder(
                    x, state.memory, everything, state.memory_mask[:, None, None, :], state.caches
                )
                out.append(model.head(x[:, 0]))
            else:
                out.append(model.decode_step(tokens[:, t], state))
    return torch.stack(out, dim=1)  # (B, T, V)


CACHE_CASES = [
    pytest.param({"layer_sharing": {"decoder": "(0x3)"}}, id="dec(0x3)"),
    pytest.param({"layer_sharing": {"decoder": "0,1,0"}}, id="dec0,1,0"),
    pytest.param({"attention_sharing": "kv"}, id="kv"),
    pytest.param({"attention_sharing": "kv", "layer_sharing": "(0x3)", "encoder_layers": 3},
                 id="kv+(0x3)"),
    pytest.param({"attention_sharing": "kv", "layer_sharing": {"decoder": "0,1,0"}},
                 id="kv+0,1,0"),
    pytest.param({"attention_sharing": "qk", "qk_multiplier": 2, "groups": 2,
                  "group_attention": True, "weight_sharing": True,
                  "layer_sharing": {"decoder": "0,1,0"}, "radix_base": 5}, id="qk+groups+radix"),
    pytest.param({"attention_sharing": "kv", "qk_norm": True,
                  "layer_sharing": {"decoder": "0,1,0"}}, id="kv+qk_norm"),
    pytest.param({"attention_sharing": "qk", "qk_multiplier": 2, "qk_norm": True},
                 id="qk+qk_norm"),
    pytest.param({"qk_norm": True}, id="qk_norm"),
    pytest.param({}, id="unshared"),
]


@pytest.mark.parametrize("changes", CACHE_CASES)
def test_cached_decoding_equals_full_decoding(changes: dict[str, Any]) -> None:
    model = _tiny_model(**changes)
    inputs = _inputs(model, 3)
    with torch.no_grad():
        full = model(**inputs)
    torch.testing.assert_close(_step_logits(model, inputs), full, atol=1e-5, rtol=1e-5)


def test_cached_decoding_equals_full_decoding_with_pad_tokens() -> None:
    model = _tiny_model(attention_sharing="kv", layer_sharing={"decoder": "0,1,0"})
    inputs = _inputs(model, 3)
    inputs["tokens"][0, 3:] = model.pad_id
    inputs["tokens"][1, 2] = model.pad_id
    with torch.no_grad():
        full = model(**inputs)
    torch.testing.assert_close(_step_logits(model, inputs), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pattern", ["(0x3)", "0,1,0"])
@pytest.mark.parametrize("sharing", ["none", "kv"])
def test_a_per_module_cache_is_caught_when_decoder_layers_are_shared(
    pattern: str, sharing: str
) -> None:
    model = _tiny_model(attention_sharing=sharing, layer_sharing={"decoder": pattern})
    inputs = _inputs(model, 3)
    with torch.no_grad():
        full = model(**inputs)
    buggy = _step_logits(model, inputs, caches="per-module")
    # a later depth of a shared module finds the earlier depth's keys in "its" cache: every
    # step differs, the first one included
    for t in range(full.shape[1]):
        assert not torch.allclose(buggy[:, t], full[:, t], atol=1e-3), t
    torch.testing.assert_close(_step_logits(model, inputs), full, atol=1e-5, rtol=1e-5)


def test_the_per_module_simulation_is_right_without_sharing() -> None:
    model = _tiny_model(attention_sharing="kv")
    inputs = _inputs(model, 2)
    with torch.no_grad():
        full = model(**inputs)
    torch.testing.assert_close(
        _step_logits(model, inputs, caches="per-module"), full, atol=1e-5, rtol=1e-5
    )


# ---------------------------------------------------------------------- greedy and beam search
def _first_eos_mask(seqs: torch.Tensor, eos: int) -> torch.Tensor:
    """True up to and including the first EOS of each row."""
    seen_before = (seqs == eos).long().cumsum(dim=1) - (seqs == eos).long()
    return seen_before == 0


@pytest.mark.parametrize("changes", [
    pytest.param({"radix_base": 3, "layer_sharing": {"decoder": "0,1,0"}}, id="radix3"),
    pytest.param({"attention_sharing": "kv"}, id="words"),
])
def test_greedy_decoding_follows_the_argmax_of_full_decoding(changes: dict[str, Any]) -> None:
    model = _tiny_model(**changes)
    inputs = _inputs(model, 6)
    for eos_bias in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0):  # the first bias that ends some captions
        with torch.no_grad():
            model.head.bias[model.eos_id] += eos_bias
        out = model.generate(inputs["regions"], inputs["boxes"], max_len=9)
        if (out == model.eos_id).any():
            break
    assert out.shape[0] == 6 and 1 <= out.shape[1] <= 9
    bos = torch.full((6, 1), model.bos_id)
    with torch.no_grad():
        logits = model(inputs["regions"], inputs["boxes"], torch.cat([bos, out[:, :-1]], dim=1))
    logits[..., [model.pad_id, model.bos_id]] = -torch.inf  # never generated
    valid = _first_eos_mask(out, model.eos_id)
    assert torch.equal(logits.argmax(dim=-1)[valid], out[valid])
    assert (out[~valid] == model.pad_id).all()
    assert (out == model.eos_id).any()


def test_beam_search_of_width_one_is_greedy() -> None:
    model = _tiny_model(radix_base=3, attention_sharing="kv", layer_sharing="(0x2,1)",
                        encoder_layers=3)
    inputs = _inputs(model, 5)
    greedy = model.generate(inputs["regions"], inputs["boxes"], max_len=10)
    state = model.start_decoding(inputs["regions"], inputs["boxes"])
    assert torch.equal(beam_search(model, state, 10, 1), greedy)


def _sequence_scores(
    model: ORTCaptioner, inputs: dict[str, torch.Tensor], seqs: torch.Tensor
) -> torch.Tensor:
    """Sum of log-probabilities (up to the first EOS) of ``seqs`` (N, L) for every image."""
    b, n = inputs["regions"].shape[0], seqs.shape[0]
    regions = inputs["regions"].repeat_interleave(n, dim=0)
    boxes = inputs["boxes"].repeat_interleave(n, dim=0)
    targets = seqs.repeat(b, 1)  # (B*N, L)
    dec_in = torch.cat([torch.full((b * n, 1), model.bos_id), targets[:, :-1]], dim=1)
    with torch.no_grad():
        logp = model(regions, boxes, dec_in).log_softmax(dim=-1)
    picked = logp.gather(2, targets.unsqueeze(2)).squeeze(2)  # (B*N, L)
    picked = picked.masked_fill(~_first_eos_mask(targets, model.eos_id), 0.0)
    return picked.sum(dim=1).view(b, n)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_search_finds_the_best_caption_by_brute_force(length_penalty: float) -> None:
    model = _tiny_model(radix_base=2, layer_sharing={"decoder": "0,1,0"}, attention_sharing="kv")
    inputs = _inputs(model, 3)
    length, allowed = 3, [0, 1, model.eos_id]
    canonical = set()
    for seq in itertools.product(allowed, repeat=length):
        cut = seq.index(model.eos_id) + 1 if model.eos_id in seq else length
        canonical.add(seq[:cut] + (model.pad_id,) * (length - cut))
    seqs = torch.tensor(sorted(canonical))  # (15, 3): every caption of <= 3 tokens
    lengths = (seqs != model.pad_id).sum(dim=1).float()
    ranked = _sequence_scores(model, inputs, seqs) / lengths.pow(length_penalty)
    expected = seqs[ranked.argmax(dim=1)]  # (B, 3)
    got = model.generate(inputs["regions"], inputs["boxes"], beam_size=len(seqs),
                         max_len=length, length_penalty=length_penalty)
    got = torch.nn.functional.pad(got, (0, length - got.shape[1]), value=model.pad_id)
    assert torch.equal(got, expected)


def test_beam_output_decodes_through_the_radix_tokenizer() -> None:
    words = [f"w{i}" for i in range(46)] + [UNK]
    tokenizer = RadixTokenizer(words, 3)
    model = _tiny_model(radix_base=3, attention_sharing="kv", layer_sharing={"decoder": "0,1,0"})
    assert tokenizer.digits == 4 and model.vocab_size == tokenizer.vocab_size
    inputs = _inputs(model, 4)
    out = model.generate(inputs["regions"], inputs["boxes"], beam_size=3, max_len=7)
    decoded = tokenizer.decode_batch(out)
    assert len(decoded) == 4
    for row, sentence in zip(out.tolist(), decoded, strict=True):
        content = [t for t in row if t < 3]
        if model.eos_id in row:
            content = [t for t in row[: row.index(model.eos_id)] if t < 3]
        assert len(sentence) == len(content) // 4  # a ragged tail of digits is dropped
        assert set(sentence) <= set(tokenizer.words)


def test_decoding_past_the_position_table_extends_it() -> None:
    # A model that never emits EOS decodes to max_len, which may pass the table built for the
    # task's captions (the trainer's max_decode_len is its own setting): the sinusoids extend.
    model = _tiny_model().eval()
    with torch.no_grad():
        model.head.bias[model.eos_id] = -1e4  # never finish early
    inputs = _inputs(model, 2)
    limit = model.token_embed.positions.shape[0]
    wide = copy.deepcopy(model)
    dim = model.token_embed.positions.shape[1]
    wide.token_embed.positions = ort_module._sinusoid_table(4 * limit, dim, "cpu", torch.float32)
    out = model.generate(inputs["regions"], inputs["boxes"], max_len=limit + 5)
    assert out.shape == (2, limit + 5)
    assert model.token_embed.positions.shape[0] >= limit + 5
    assert torch.equal(model.token_embed.positions, wide.token_embed.positions[:len(
        model.token_embed.positions)])
    assert torch.equal(out, wide.generate(inputs["regions"], inputs["boxes"], max_len=limit + 5))
