"""The built-in proxy tasks, the task registry, batching and the metrics (trainers.tasks)."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch

from nas.errors import ConfigError
from nas.radix import RadixTokenizer, WordTokenizer
from trainers.tasks import TaskData, collate, get_task, list_tasks, task_kind, task_options
from trainers.tasks import synthetic_vqa as sv
from trainers.tasks.metrics import accuracy, bleu4, cider_d, cider_d_scores, vqa_accuracy
from trainers.tasks.scenes import ATTRIBUTES, Scene, sample_scene

SMALL = {"train_size": 300, "val_size": 100}


@pytest.fixture(scope="module")
def vqa() -> TaskData:
    return get_task("synthetic-vqa")  # default sizes: the chance level is part of the contract


@pytest.fixture(scope="module")
def captions() -> TaskData:
    return get_task("synthetic-captions")


def _items(data: TaskData, split: str = "train", n: int | None = None) -> list[dict]:
    ds = getattr(data, split)
    return [ds[i] for i in range(len(ds) if n is None else n)]


# ----------------------------------------------------------------------------- registry
def test_list_tasks_names_builtins_and_file_formats() -> None:
    assert list_tasks() == ["synthetic-vqa", "synthetic-captions", "digits", "vqa-files",
                            "coco-files", "image-folder", "cifar"]
    assert task_options("synthetic-vqa")["train_size"] == 4000


@pytest.mark.parametrize("name", ["synthetic-vqa", "synthetic-captions", "digits"])
def test_task_kind_is_the_built_geometrys(name: str) -> None:
    """The registry's kind, known without building (the file tasks: ``test_datasets``)."""
    small = {} if name == "digits" else {"train_size": 20, "val_size": 10}
    assert task_kind(name) == get_task(name, **small).geometry.kind


def test_list_tasks_by_kind_partitions_them() -> None:
    kinds = {k: list_tasks(k) for k in ("image", "vqa", "caption")}
    assert kinds == {"image": ["digits", "image-folder", "cifar"],
                     "vqa": ["synthetic-vqa", "vqa-files"],
                     "caption": ["synthetic-captions", "coco-files"]}
    assert sorted(n for names in kinds.values() for n in names) == sorted(list_tasks())
    with pytest.raises(ConfigError, match="Unknown task 'mnist'"):
        task_kind("mnist")


@pytest.mark.parametrize(
    ("name", "options", "needle"),
    [
        ("no-such-task", {}, "'no-such-task'"),
        ("synthetic-vqa", {"batch": 3}, "'batch'"),
        ("synthetic-vqa", {"train_size": "many"}, "train_size='many'"),
        ("synthetic-vqa", {"train_size": True}, "train_size=True"),
        ("synthetic-vqa", {"val_size": 0}, "val_size=0"),
        ("synthetic-captions", {"noise": -0.1}, "noise=-0.1"),
        ("synthetic-captions", {"synonym_rate": 1.5}, "synonym_rate=1.5"),
        ("digits", {"in_chans": 2}, "in_chans=2"),
        ("image-folder", {}, "'root'"),
        ("coco-files", {"train_splits": "train"}, "train_splits='train'"),
        ("digits", {"image_size": 100_000}, "must be <= 1024"),
        ("digits", {"seed": 2**32}, "must be <= 4294967295"),
        ("synthetic-vqa", {"train_size": 10**9}, "must be <= 10000000"),
        ("synthetic-vqa", {"noise": float("inf")}, "finite"),
        ("synthetic-vqa", {"train_size": 10**7, "region_dim": 8192}, "would generate about"),
        ("vqa-files", {"max_regions": 4096}, "must be <= 1024"),
    ],
)
def test_bad_task_or_option_is_a_config_error_naming_it(
    name: str, options: dict, needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        get_task(name, **options)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- synthetic-vqa
def test_synthetic_vqa_items_and_geometry(vqa: TaskData) -> None:
    g = vqa.geometry
    assert (g.kind, g.num_outputs, g.question_tokens, g.regions, g.region_dim) == (
        "vqa", len(sv.ANSWERS), 16, 8, 64)
    assert g.question_vocab == len(sv.QUESTION_WORDS) + 2
    assert (len(vqa.train), len(vqa.val), vqa.metric, vqa.words) == (4000, 1000, "vqa_accuracy",
                                                                    None)
    batch = collate("vqa", _items(vqa, "val", 64))
    assert batch["question"].shape == (64, 16) and batch["question"].dtype == torch.long
    assert batch["regions"].shape == (64, 8, 64) and batch["boxes"].shape == (64, 8, 4)
    assert batch["answer_scores"].shape == (64, 26) and batch["answer"].shape == (64,)
    q = batch["question"]
    assert q.max() < g.question_vocab and q.min() >= 0 and (q[:, 0] >= 2).all()
    # padding is trailing: once a 0 appears, only 0s follow
    assert ((q == 0).long().diff(dim=1) >= 0).all()
    padding = batch["regions"].abs().sum(-1) == 0
    assert torch.equal(padding, batch["boxes"].abs().sum(-1) == 0)
    assert ((~padding).sum(1) >= 3).all() and ((~padding).sum(1) <= 8).all()
    real = batch["boxes"][~padding]
    assert (real >= 0).all() and (real <= 1).all() and (real[:, 2:] > real[:, :2]).all()
    assert torch.equal(batch["answer_scores"].sum(1), torch.ones(64))  # one-hot
    assert torch.equal(batch["answer_scores"].argmax(1), batch["answer"])


def test_synthetic_vqa_chance_is_the_majority_answer_and_low(vqa: TaskData) -> None:
    train = Counter(int(it["answer"]) for it in _items(vqa))
    majority = train.most_common(1)[0][0]
    val = [int(it["answer"]) for it in _items(vqa, "val")]
    assert vqa.chance == pytest.approx(sum(a == majority for a in val) / len(val))
    assert 0.1 < vqa.chance < 0.2
    assert len(train) >= 20  # many-way answers: yes/no, counts, colours, shapes, ...


def test_synthetic_vqa_is_deterministic_from_the_seed() -> None:
    a, b = get_task("synthetic-vqa", seed=3, **SMALL), get_task("synthetic-vqa", seed=3, **SMALL)
    c = get_task("synthetic-vqa", seed=4, **SMALL)
    for key in ("question", "regions", "boxes", "answer_scores"):
        ba, bb, bc = (collate("vqa", _items(d))[key] for d in (a, b, c))
        assert torch.equal(ba, bb)
        assert not torch.equal(ba, bc)
    # the validation split does not depend on the training split's size
    d = get_task("synthetic-vqa", seed=3, train_size=50, val_size=100)
    assert torch.equal(collate("vqa", _items(a, "val"))["regions"],
                       collate("vqa", _items(d, "val"))["regions"])


def _interpret(words: list[str], scene: Scene) -> str:
    """An independent reading of a template question: its answer on ``scene``."""
    value_of = {v: (a, i) for a, values in ATTRIBUTES.items() for i, v in enumerate(values)}
    value_of.update({f"{s}s": ("shape", i) for i, s in enumerate(ATTRIBUTES["shape"])})

    def objects(phrase: list[str]) -> list[int]:
        want = [value_of[w] for w in phrase if w in value_of]
        return [k for k in range(len(scene))
                if all(scene.attribute(a)[k] == v for a, v in want)]

    if words[0] == "how":
        return str(len(objects(words[2:-3])))
    if words[0] == "what":
        (k,) = objects(words[4:-1])
        return ATTRIBUTES[words[1]][scene.attribute(words[1])[k]]
    if words[1] == "there":
        return "yes" if objects(words[3:-1]) else "no"
    if "same" in words:
        cut = words.index("same")
        (i,), (j,) = objects(words[2:cut - 1]), objects(words[cut + 3:-1])
        same = scene.attribute(words[cut + 1])[i] == scene.attribute(words[cut + 1])[j]
        return "yes" if same else "no"
    cut = words.index("of")
    (i,), (j,) = objects(words[2:cut - 1]), objects(words[cut + 2:-1])
    left = scene.centre_x[i] < scene.centre_x[j]
    return "yes" if left == (words[cut - 1] == "left") else "no"


@pytest.mark.parametrize("kind", list(sv._MAKERS))
def test_synthetic_vqa_answers_are_right_about_the_scene(kind: str) -> None:
    rng, made = random.Random(kind), 0
    for _ in range(150):
        scene = sample_scene(rng)
        question = sv._MAKERS[kind](scene, rng)
        if question is None:
            continue
        words, answer = question
        assert len(words) <= sv.QUESTION_TOKENS and answer in sv.ANSWERS
        assert _interpret(words, scene) == answer, words
        made += 1
    assert made > 100


# ----------------------------------------------------------------------------- synthetic-captions
def test_synthetic_captions_vocabulary_is_large_and_zipf_like(captions: TaskData) -> None:
    assert captions.words is not None and len(captions.words) >= 2000
    counts = Counter(w for it in _items(captions) for ref in it["references"] for w in ref)
    assert set(counts) == set(captions.words)
    freq = [counts[w] for w in captions.words]
    assert freq == sorted(freq, reverse=True)  # descending frequency
    ranks = np.arange(10, 1001)
    slope = np.polyfit(np.log(ranks), np.log(np.asarray(freq[9:1000], float)), 1)[0]
    assert -1.6 < slope < -0.7, slope  # Zipf: frequency ~ 1 / rank
    assert captions.geometry.num_outputs == WordTokenizer(captions.words).vocab_size


def test_synthetic_captions_items_chance_and_batches(captions: TaskData) -> None:
    g = captions.geometry
    assert (g.kind, g.regions, g.region_dim, g.caption_words) == ("caption", 8, 64, 16)
    assert (len(captions.train), len(captions.val), captions.metric) == (4000, 500, "cider_d")
    val = _items(captions, "val")
    assert all(len(it["references"]) == 5 and it["caption"] == it["references"][0] for it in val)
    assert max(len(r) for it in val for r in it["references"]) <= g.caption_words
    # chance: CIDEr-D of the most frequent training caption given to every image
    train_refs = Counter(tuple(r) for it in _items(captions) for r in it["references"])
    best = list(min(train_refs.items(), key=lambda kv: (-kv[1], kv[0]))[0])
    chance = cider_d([best] * len(val), [it["references"] for it in val])
    assert captions.chance == pytest.approx(chance) and 0 < chance < 0.3
    torch.manual_seed(0)
    drawn = {tuple(captions.train[0]["caption"]) for _ in range(30)}
    assert len(drawn) > 1 and drawn <= {tuple(r) for r in captions.train[0]["references"]}

    assert captions.words is not None
    for tok in (WordTokenizer(captions.words), RadixTokenizer(captions.words, 64)):
        items = val[:4]
        batch = collate("caption", items, tok)
        ids = [tok.encode(it["caption"]) for it in items]
        t = max(len(s) for s in ids) - 1
        assert batch["tokens"].shape == batch["targets"].shape == (4, t)
        assert (batch["tokens"][:, 0] == tok.BOS).all()
        for row, seq in enumerate(ids):
            assert batch["tokens"][row, : len(seq) - 1].tolist() == seq[:-1]
            assert batch["targets"][row, : len(seq) - 1].tolist() == seq[1:]
            assert (batch["targets"][row, len(seq) - 1:] == tok.PAD).all()
            assert tok.decode(batch["targets"][row]) == items[row]["caption"]
        assert batch["references"] == [it["references"] for it in items]
        assert batch["regions"].shape == (4, 8, 64)
    with pytest.raises(ValueError, match="tokenizer"):
        collate("caption", val[:2])


def test_synthetic_captions_are_deterministic_from_the_seed() -> None:
    def build(seed: int) -> TaskData:
        return get_task("synthetic-captions", seed=seed, train_size=50, val_size=20)

    a, b, c = build(1), build(1), build(2)
    assert a.words == b.words and a.words != c.words
    ra, rb, rc = (collate("caption", _items(d, "val"), WordTokenizer(a.words or ()))
                  for d in (a, b, c))
    assert torch.equal(ra["regions"], rb["regions"]) and ra["references"] == rb["references"]
    assert not torch.equal(ra["regions"], rc["regions"]) and ra["references"] != rc["references"]


# ----------------------------------------------------------------------------- digits
def test_digits_split_is_stratified_deterministic_and_normalised() -> None:
    a, b, c = get_task("digits"), get_task("digits"), get_task("digits", seed=1)
    assert (a.geometry.kind, a.geometry.num_outputs, a.geometry.image_size,
            a.geometry.in_chans) == ("image", 10, 32, 1)
    batch = collate("image", _items(a))
    assert batch["images"].shape == (len(a.train), 1, 32, 32) and batch["label"].dtype == torch.long
    assert abs(float(batch["images"].mean())) < 1e-3 and float(batch["images"].std()) == (
        pytest.approx(1.0, abs=1e-3))
    assert len(a.train) + len(a.val) == 1797 and len(a.val) == 360
    val_labels = collate("image", _items(a, "val"))["label"]
    assert torch.bincount(val_labels).min() >= 35  # every class ~10% of val
    assert a.chance == pytest.approx(0.1, abs=0.01)
    assert torch.equal(batch["images"], collate("image", _items(b))["images"])
    assert not torch.equal(batch["label"], collate("image", _items(c))["label"])
    rgb = get_task("digits", in_chans=3, image_size=16)
    assert rgb.train[0]["images"].shape == (3, 16, 16) and rgb.geometry.in_chans == 3


# ----------------------------------------------------------------------------- metrics
def test_accuracy_and_vqa_accuracy() -> None:
    assert accuracy(torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])) == pytest.approx(2 / 3)
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2]])
    assert accuracy(logits, torch.tensor([1, 1])) == 0.5
    scores = torch.tensor([[1.0, 1 / 3, 0.0], [0.0, 2 / 3, 1.0]])
    assert vqa_accuracy(torch.tensor([1, 1]), scores) == pytest.approx(0.5)
    assert vqa_accuracy(torch.tensor([[5.0, 0, 0], [0, 0, 5.0]]), scores) == pytest.approx(1.0)


def test_bleu4_on_hand_computed_cases() -> None:
    assert bleu4(["a b c d e"], [["a b c d e", "x y"]]) == pytest.approx(1.0)
    assert bleu4([["a", "b", "c", "d"]], [[["w", "x", "y", "z"]]]) == 0.0
    # precisions 5/6, 3/5, 2/4, 1/3, equal lengths
    expected = (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert bleu4(["a b c d e f"], [["a b c d x f"]]) == pytest.approx(expected)
    # brevity penalty exp(1 - r/c), r = 8, c = 4; the closest reference length decides r
    assert bleu4(["a b c d"], [["a b c d e f g h"]]) == pytest.approx(math.exp(-1))
    assert bleu4(["a b c d"], [["a b c d e f g h", "a b c d x"]]) == pytest.approx(math.exp(-0.25))
    # corpus level: n-gram counts are pooled before the precisions are taken
    assert bleu4(["a b c d", "p q r s"], [["a b c d"], ["p q r t"]]) == pytest.approx(
        (7 / 8 * 5 / 6 * 3 / 4 * 1 / 2) ** 0.25)


def test_cider_d_on_hand_computed_cases() -> None:
    refs = [["a b"], ["c d"]]
    # identical captions whose n-grams are unique to their image: 10 * mean over n of cos = 1
    assert cider_d(["a b c d", "e f g h"], [["a b c d"], ["e f g h"]]) == pytest.approx(10.0)
    assert cider_d(["x y", "z w"], refs) == 0.0
    assert cider_d(["a b"], [["a b"]]) == 0.0  # one image: every idf is log(1) = 0
    # image 1: unigram cosine 1/2 ("a" shared of {a, c} vs {a, b}), no shared bigram;
    # image 2: identical, unigram and bigram cosines 1. Orders 3 and 4 are empty.
    assert cider_d_scores(["a c", "c d"], refs) == pytest.approx([10 * 0.5 / 4, 10 * 2 / 4])
    # clipping: "a" counted twice in the candidate is clipped to the reference's once
    assert cider_d_scores(["a a", "c d"], refs)[0] == pytest.approx(10 / (2 * math.sqrt(2)) / 4)
    # length penalty: 2 bigrams against 1 -> exp(-1 / (2 * 6**2))
    cos1, cos2 = 2 / math.sqrt(6), 1 / math.sqrt(2)
    expected = 10 * (cos1 + cos2) * math.exp(-1 / 72) / 4
    assert cider_d_scores(["a b q", "c d"], refs)[0] == pytest.approx(expected)
    with pytest.raises(ValueError, match="references"):
        cider_d(["a"], [])
