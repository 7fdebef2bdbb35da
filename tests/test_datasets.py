"""Loading the user's dataset files: vqa-files, coco-files, image-folder and cifar.

Each test writes tiny files in exactly the documented layout into ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from nas.errors import NasError
from nas.radix import WordTokenizer
from nas_cli.main import main as nas_main
from trainers.tasks import collate, get_task, task_kind
from trainers.tasks.vqa_files import normalize_answer, tokenize_question

DIM = 16  # region feature width of the tiny files (the option region_dim says it)


def _npz(path: Path, regions: int, *, dim: int = DIM, openvqa: bool = False,
         size: tuple[int, int] | None = (200, 100)) -> None:
    rng = np.random.default_rng(len(path.name))
    x = rng.normal(size=(regions, dim)).astype(np.float32) + 3.0  # never all-zero
    bbox = np.tile(np.asarray([[10.0, 20.0, 110.0, 70.0]], np.float32), (regions, 1))
    arrays: dict[str, Any] = {"x": x.T if openvqa else x, "bbox": bbox}
    if size is not None:
        arrays.update(image_w=size[0], image_h=size[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _answers(*pairs: tuple[str, int]) -> list[dict[str, str]]:
    return [{"answer": a} for a, n in pairs for _ in range(n)]


# ----------------------------------------------------------------------------- vqa-files
VQA_FILES = {
    "train_questions": "v2_OpenEnded_mscoco_train2014_questions.json",
    "train_annotations": "v2_mscoco_train2014_annotations.json",
    "val_questions": "v2_OpenEnded_mscoco_val2014_questions.json",
    "val_annotations": "v2_mscoco_val2014_annotations.json",
}


@pytest.fixture
def vqa_root(tmp_path: Path) -> Path:
    """Three training and two validation questions over OpenVQA-named feature files."""
    train_q = [
        {"image_id": 9, "question": "What color is the cat?", "question_id": 90},
        {"image_id": 9, "question": "How many cats are there?", "question_id": 91},
        {"image_id": 25, "question": "Is the cat black?", "question_id": 250},
    ]
    train_a = [
        {"question_id": 90, "image_id": 9, "multiple_choice_answer": "black",
         "answers": _answers(("black", 8), ("Dark.", 2))},
        {"question_id": 91, "image_id": 9, "multiple_choice_answer": "two",
         "answers": _answers(("2", 6), ("two", 3), ("three", 1))},
        {"question_id": 250, "image_id": 25, "multiple_choice_answer": "yes",
         "answers": _answers(("yes", 2), ("no", 8))},
    ]
    val_q = [
        {"image_id": 42, "question": "Is the dog brown?", "question_id": 420},
        {"image_id": 42, "question": "What animal is this?", "question_id": 421},
    ]
    val_a = [
        {"question_id": 420, "image_id": 42, "multiple_choice_answer": "yes",
         "answers": _answers(("yes", 1), ("no", 9))},
        {"question_id": 421, "image_id": 42, "multiple_choice_answer": "dog",
         "answers": _answers(("dog", 10))},
    ]
    for key, data in (("train_questions", {"questions": train_q}),
                      ("train_annotations", {"annotations": train_a}),
                      ("val_questions", {"questions": val_q}),
                      ("val_annotations", {"annotations": val_a})):
        _write_json(tmp_path / VQA_FILES[key], data)
    _npz(tmp_path / "feats/train2014/COCO_train2014_000000000009.jpg.npz", 5)
    _npz(tmp_path / "feats/train2014/25.npz", 3, openvqa=True, size=None)
    _npz(tmp_path / "feats/val2014/COCO_val2014_000000000042.jpg.npz", 7)
    return tmp_path


def _vqa(root: Path, **options: Any) -> Any:
    return get_task("vqa-files", root=str(root), region_dim=DIM, max_regions=6, min_count=1,
                    **options)


def test_vqa_files_load_questions_answers_and_features(vqa_root: Path) -> None:
    data = _vqa(vqa_root)
    g = data.geometry
    # answers by frequency of multiple_choice_answer, normalised ("two" -> "2"), ties a-z
    assert (g.kind, g.num_outputs, g.question_tokens, g.regions, g.region_dim) == (
        "vqa", 3, 14, 6, DIM)
    assert task_kind("vqa-files") == g.kind  # the registry knows it without building
    words = {w for q in ("What color is the cat?", "How many cats are there?",
                         "Is the cat black?") for w in tokenize_question(q)}
    assert g.question_vocab == len(words) + 2
    assert (len(data.train), len(data.val), data.metric) == (3, 2, "vqa_accuracy")

    batch = collate("vqa", [data.train[i] for i in range(3)])
    assert batch["question"].shape == (3, 14) and batch["regions"].shape == (3, 6, DIM)
    # answers: index 0..2 = "2", "black", "yes" (each seen once; ties alphabetical)
    expected = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2 / 3]])
    assert torch.allclose(batch["answer_scores"], expected)
    assert batch["answer"].tolist() == [1, 0, 2]
    # question words by frequency, ties alphabetical: cat, is, the (twice each), then are, ...
    # "what color is the cat" -> what=12 color=8 is=3 the=4 cat=2, then padding
    assert batch["question"][0, :7].tolist() == [12, 8, 3, 4, 2, 0, 0]
    # regions: 5 real rows then padding; boxes divided by image_w=200, image_h=100
    assert batch["regions"][0, :5].abs().sum(-1).gt(0).all() and batch["regions"][0, 5:].eq(0).all()
    assert torch.allclose(batch["boxes"][0, 0], torch.tensor([0.05, 0.2, 0.55, 0.7]))
    # OpenVQA's (D, R) orientation, boxes scaled by the largest corner without image size
    assert batch["regions"][2, :3].abs().sum(-1).gt(0).all() and batch["regions"][2, 3:].eq(0).all()
    assert torch.allclose(batch["boxes"][2, 0], torch.tensor([10 / 110, 20 / 70, 1.0, 1.0]))
    # val: unknown words are 1; chance answers the majority training answer ("2" wins the
    # three-way tie by id), which no validation annotator gave
    val = collate("vqa", [data.val[i] for i in range(2)])
    assert val["question"][1].tolist()[:4] == [12, 1, 3, 1]  # what animal is this
    assert torch.allclose(val["answer_scores"], torch.tensor([[0.0, 0.0, 1 / 3], [0.0] * 3]))
    assert data.chance == 0.0


def test_vqa_answer_and_question_normalisation() -> None:
    assert normalize_answer(" Two Dogs. ") == "2 dogs"
    assert normalize_answer("the cat's toy") == "cats toy"
    assert normalize_answer("3.5") == "3.5"
    assert tokenize_question("What's on the T-shirt?") == ["whats", "on", "the", "t", "shirt"]


def test_vqa_files_min_count_and_sizes(vqa_root: Path) -> None:
    data = _vqa(vqa_root, train_size=2, val_size=1)
    assert (len(data.train), len(data.val), data.geometry.num_outputs) == (2, 1, 2)


def _one_line(info: pytest.ExceptionInfo[NasError], path: Path) -> None:
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message


@pytest.mark.parametrize(
    ("breakage", "culprit"),
    [
        ("missing questions", "val_questions"),
        ("malformed questions", "train_questions"),
        ("malformed annotations", "val_annotations"),
        ("not a questions file", "train_questions"),
        ("empty split", "val_questions"),
        ("question without annotation", "train_annotations"),
    ],
)
def test_vqa_files_bad_json_names_the_file(vqa_root: Path, breakage: str, culprit: str) -> None:
    path = vqa_root / VQA_FILES[culprit]
    if breakage.startswith("missing"):
        path.unlink()
    elif breakage.startswith("malformed"):
        path.write_text('{"questions": [')
    elif breakage == "not a questions file":
        _write_json(path, {"annotations": []})
    elif breakage == "empty split":
        _write_json(path, {"questions": []})
    else:
        data = json.loads(path.read_text())
        data["annotations"] = data["annotations"][1:]
        _write_json(path, data)
    with pytest.raises(NasError) as info:
        _vqa(vqa_root)
    _one_line(info, path)


def test_vqa_files_bad_features_name_the_file(vqa_root: Path) -> None:
    with pytest.raises(NasError) as info:  # the files are 16-d, the default expects 2048
        get_task("vqa-files", root=str(vqa_root), min_count=1)
    _one_line(info, vqa_root / "feats/train2014/COCO_train2014_000000000009.jpg.npz")
    assert "region_dim=2048" in str(info.value)

    broken = vqa_root / "feats/val2014/COCO_val2014_000000000042.jpg.npz"
    broken.write_bytes(b"not an npz")
    with pytest.raises(NasError) as info:
        _vqa(vqa_root)
    _one_line(info, broken)

    broken.unlink()
    with pytest.raises(NasError) as info:  # no feature file for image 42
        _vqa(vqa_root)
    _one_line(info, vqa_root / "feats/val2014")
    assert "42" in str(info.value)

    with pytest.raises(NasError) as info:
        _vqa(vqa_root, val_features="nowhere")
    _one_line(info, vqa_root / "nowhere")


# ----------------------------------------------------------------------------- coco-files
@pytest.fixture
def coco_root(tmp_path: Path) -> Path:
    """Karpathy split file: 3 train/restval images, 1 val, 1 test; cocoid-named features."""
    def image(cocoid: int, split: str, *sentences: str) -> dict[str, Any]:
        return {"filename": f"COCO_val2014_{cocoid:012d}.jpg", "cocoid": cocoid, "split": split,
                "sentences": [{"tokens": s.split(), "raw": s} for s in sentences]}

    images = [
        image(1, "train", "a cat on a mat", "A black cat sitting"),
        image(2, "restval", "a dog on a mat", "a dog running"),
        image(3, "train", "a cat and a dog"),
        image(4, "val", "a cat on a sofa", "a sleeping cat", "the cat"),
        image(5, "test", "a bird"),
    ]
    _write_json(tmp_path / "dataset_coco.json", {"images": images, "dataset": "coco"})
    for cocoid in range(1, 6):
        _npz(tmp_path / "feats" / f"{cocoid}.npz", 4)
    return tmp_path


def _coco(root: Path, **options: Any) -> Any:
    return get_task("coco-files", root=str(root), region_dim=DIM, max_regions=5, **options)


def test_coco_files_load_captions_vocabulary_and_features(coco_root: Path) -> None:
    data = _coco(coco_root, min_count=2, max_words=4)
    # training words (lowercased) seen >= 2 times, most frequent first, ties alphabetical
    assert data.words == ("a", "cat", "dog", "mat", "on")
    g = data.geometry
    assert (g.kind, g.num_outputs, g.regions, g.region_dim, g.caption_words) == (
        "caption", WordTokenizer(data.words).vocab_size, 5, DIM, 4)
    assert task_kind("coco-files") == g.kind
    assert (len(data.train), len(data.val), data.metric) == (3, 1, "cider_d")
    item = data.val[0]
    assert item["references"] == [["a", "cat", "on", "a", "sofa"], ["a", "sleeping", "cat"],
                                  ["the", "cat"]]
    assert item["caption"] == ["a", "cat", "on", "a"]  # first reference, cut to max_words
    assert item["regions"].shape == (5, DIM) and item["regions"][4].eq(0).all()
    assert data.train[0]["caption"] in (["a", "cat", "on", "a"], ["a", "black", "cat", "sitting"])
    batch = collate("caption", [data.train[i] for i in range(3)], WordTokenizer(data.words))
    assert batch["tokens"].shape[0] == 3 and batch["references"][2] == [["a", "cat", "and", "a",
                                                                        "dog"]]
    assert data.chance >= 0.0
    test_side = _coco(coco_root, val_split="test", train_splits=["train"])
    assert (len(test_side.train), len(test_side.val)) == (2, 1)


@pytest.mark.parametrize("breakage", ["missing", "malformed", "no images list", "empty split",
                                      "no tokens", "feature size", "missing features"])
def test_coco_files_bad_input_names_the_file(coco_root: Path, breakage: str) -> None:
    path = coco_root / "dataset_coco.json"
    options: dict[str, Any] = {}
    if breakage == "missing":
        path.unlink()
    elif breakage == "malformed":
        path.write_text("{'images': []}")
    elif breakage == "no images list":
        _write_json(path, [1, 2])
    elif breakage == "empty split":
        options["val_split"] = "nonexistent"
    elif breakage == "no tokens":
        data = json.loads(path.read_text())
        data["images"][0]["sentences"] = [{"raw": "a cat"}]
        _write_json(path, data)
    elif breakage == "feature size":
        path = coco_root / "feats" / "1.npz"
        _npz(path, 4, dim=DIM + 1)
    else:
        (coco_root / "feats" / "4.npz").unlink()
        path = coco_root / "feats"
    with pytest.raises(NasError) as info:
        _coco(coco_root, **options)
    _one_line(info, path)


# ----------------------------------------------------------------------------- image-folder
def _png(path: Path, value: int, size: tuple[int, int] = (12, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (value, 255 - value, 128)).save(path)


@pytest.fixture
def folder_root(tmp_path: Path) -> Path:
    for split, counts in (("train", {"cat": 3, "dog": 2}), ("val", {"cat": 1, "dog": 2})):
        for cls, n in counts.items():
            for i in range(n):
                _png(tmp_path / split / cls / f"{i}.png", 40 * i)
    return tmp_path


def test_image_folder_loads_resized_normalised_images(folder_root: Path) -> None:
    data = get_task("image-folder", root=str(folder_root), image_size=16)
    assert (data.geometry.num_outputs, data.geometry.image_size, data.geometry.in_chans) == (
        2, 16, 3)
    assert task_kind("image-folder") == data.geometry.kind == "image"
    batch = collate("image", [data.train[i] for i in range(len(data.train))])
    assert batch["images"].shape == (5, 3, 16, 16) and batch["label"].tolist() == [0, 0, 0, 1, 1]
    assert data.chance == pytest.approx(1 / 3)  # "cat" is the training majority
    gray = get_task("image-folder", root=str(folder_root), image_size=8, in_chans=1)
    assert gray.val[0]["images"].shape == (1, 8, 8)


@pytest.mark.parametrize("breakage", ["missing split", "empty split", "class mismatch"])
def test_image_folder_bad_layout_names_the_folder(folder_root: Path, breakage: str) -> None:
    val = folder_root / "val"
    for p in sorted(val.rglob("*"), reverse=True):
        if breakage != "class mismatch" or p.parent.name == "dog" or p.name == "dog":
            p.unlink() if p.is_file() else p.rmdir()
    if breakage == "missing split":
        val.rmdir()
    with pytest.raises(NasError) as info:
        get_task("image-folder", root=str(folder_root), image_size=8)
    _one_line(info, val)


# ----------------------------------------------------------------------------- cifar
def _py2_str(text: bytes) -> bytes:
    """A Python 2 ``str`` as cPickle writes it (SHORT_BINSTRING or BINSTRING)."""
    if len(text) < 256:
        return b"U" + bytes([len(text)]) + text
    return b"T" + struct.pack("<i", len(text)) + text


def _py2_int(i: int) -> bytes:
    return b"K" + bytes([i]) if 0 <= i < 256 else b"J" + struct.pack("<i", i)


def _python2_pickle(batch: dict[bytes, Any]) -> bytes:
    """``batch`` opcode for opcode as the CIFAR files were written: Python 2's cPickle,
    protocol 2, numpy 1.x (``numpy.core.multiarray._reconstruct``, a uint8 ``numpy.dtype``)."""
    def value(v: Any) -> bytes:
        if isinstance(v, bytes):
            return _py2_str(v)
        if isinstance(v, list):
            return b"](" + b"".join(value(x) for x in v) + b"e"
        if isinstance(v, int):
            return _py2_int(v)
        n, width = v.shape
        return (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + _py2_int(0)
                + b"\x85" + _py2_str(b"b") + b"\x87R(" + _py2_int(1) + _py2_int(n)
                + _py2_int(width) + b"\x86cnumpy\ndtype\n" + _py2_str(b"u1") + _py2_int(0)
                + _py2_int(1) + b"\x87R(" + _py2_int(3) + _py2_str(b"|") + b"NNN"
                + _py2_int(-1) + _py2_int(-1) + _py2_int(0) + b"tb\x89"
                + _py2_str(v.tobytes()) + b"tb")

    items = b"".join(_py2_str(k) + value(v) for k, v in batch.items())
    return b"\x80\x02}(" + items + b"u."


def _cifar_batch(path: Path, n: int, label_key: str, classes: int, seed: int,
                 protocol: int | str = pickle.DEFAULT_PROTOCOL) -> dict[bytes, Any]:
    """A batch as CIFAR's python version holds it, pickled with ``protocol`` (or, with
    ``"python2"``, as the published files are)."""
    rng = np.random.default_rng(seed)
    batch = {b"batch_label": b"training batch 1 of 1",
             label_key.encode(): [int(i % classes) for i in range(n)],
             b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
             b"filenames": [b"img_%d.png" % i for i in range(n)]}
    if label_key == "fine_labels":
        batch[b"coarse_labels"] = [int(i % 20) for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = _python2_pickle(batch) if protocol == "python2" else pickle.dumps(batch, protocol)
    path.write_bytes(blob)
    return batch


@pytest.fixture
def cifar10_root(tmp_path: Path) -> Path:
    base = tmp_path / "cifar-10-batches-py"
    for i in range(1, 6):
        _cifar_batch(base / f"data_batch_{i}", 4, "labels", 10, i)
    _cifar_batch(base / "test_batch", 6, "labels", 10, 0)
    return tmp_path


def test_cifar10_and_cifar100_python_batches(cifar10_root: Path, tmp_path: Path) -> None:
    data = get_task("cifar", root=str(cifar10_root))
    assert (data.geometry.num_outputs, data.geometry.image_size) == (10, 32)
    assert task_kind("cifar") == data.geometry.kind == "image"
    batch = collate("image", [data.train[i] for i in range(len(data.train))])
    assert batch["images"].shape == (20, 3, 32, 32)
    assert batch["images"].mean(dim=(0, 2, 3)).abs().max() < 1e-4  # per-channel train stats
    assert batch["label"][:4].tolist() == [0, 1, 2, 3] and len(data.val) == 6
    assert data.chance == pytest.approx(1 / 6)  # class 0 is a training majority tie-winner
    assert get_task("cifar", root=str(cifar10_root), image_size=16).val[0]["images"].shape == (
        3, 16, 16)

    base = tmp_path / "c100" / "cifar-100-python"
    _cifar_batch(base / "train", 8, "fine_labels", 100, 1)
    _cifar_batch(base / "test", 3, "fine_labels", 100, 2)
    c100 = get_task("cifar", root=str(base))
    assert (c100.geometry.num_outputs, len(c100.train), len(c100.val)) == (100, 8, 3)


@pytest.mark.parametrize("breakage", ["missing", "malformed", "empty", "nothing",
                                      "an image folder"])
def test_cifar_bad_input_names_the_file(cifar10_root: Path, breakage: str) -> None:
    path = cifar10_root / "cifar-10-batches-py" / "test_batch"
    if breakage == "missing":
        path.unlink()
    elif breakage == "malformed":
        path.write_bytes(b"\x80\x04garbage")
    elif breakage == "empty":
        _cifar_batch(path, 0, "labels", 10, 0)
    else:  # no CIFAR folder; an image-folder root has a train/ folder, not CIFAR-100's file
        path = cifar10_root / "elsewhere"
        path.mkdir()
        if breakage == "an image folder":
            (path / "train" / "cat").mkdir(parents=True)
    with pytest.raises(NasError) as info:
        get_task("cifar", root=str(path if path.is_dir() else cifar10_root))
    _one_line(info, path)
    if path.is_dir():
        assert str(info.value).startswith(f"No CIFAR data under '{path}'")


@pytest.mark.parametrize("protocol", ["python2", 2, pickle.DEFAULT_PROTOCOL, 5])
def test_cifar_pickles_load_through_the_restricted_unpickler(tmp_path: Path, protocol) -> None:
    """The published files (Python 2, numpy 1.x) and copies pickled again by Python 3 (protocol
    2 spells bytes with ``_codecs.encode``, protocol 5 arrays with ``_frombuffer``)."""
    base = tmp_path / "cifar-10-batches-py"
    written = [_cifar_batch(base / f"data_batch_{i}", 2, "labels", 10, i, protocol)
               for i in range(1, 6)]
    test = _cifar_batch(base / "test_batch", 3, "labels", 10, 9, protocol)
    c10 = get_task("cifar", root=str(tmp_path))
    assert torch.equal(c10.train.images, torch.as_tensor(
        np.concatenate([b[b"data"] for b in written])).reshape(-1, 3, 32, 32))
    assert torch.equal(c10.val.images, torch.as_tensor(test[b"data"]).reshape(-1, 3, 32, 32))
    assert c10.val.labels.tolist() == test[b"labels"]

    base = tmp_path / "c100" / "cifar-100-python"
    train = _cifar_batch(base / "train", 5, "fine_labels", 100, 1, protocol)
    _cifar_batch(base / "test", 2, "fine_labels", 100, 2, protocol)
    c100 = get_task("cifar", root=str(base.parent))
    assert (c100.geometry.num_outputs, len(c100.train), len(c100.val)) == (100, 5, 2)
    assert c100.train.labels.tolist() == train[b"fine_labels"]


class _Payload:
    """Pickles as a call of ``func(*args)``: what a crafted dataset file would run on load."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _payloads(marker: Path) -> dict[str, Any]:
    touch = f"touch {marker}"
    return {
        "os.system": _Payload(os.system, touch),
        "builtins.eval": _Payload(eval, f"__import__('os').system({touch!r})"),
        "subprocess.Popen": _Payload(subprocess.Popen, ["touch", str(marker)]),
    }


@pytest.mark.parametrize("kind", ["os.system", "builtins.eval", "subprocess.Popen"])
@pytest.mark.parametrize("where", ["whole file", "inside the labels"])
def test_cifar_refuses_a_pickle_that_would_run_code(cifar10_root: Path, tmp_path: Path,
                                                    kind: str, where: str) -> None:
    marker = tmp_path / "pwned"
    payload = _payloads(marker)[kind]
    path = cifar10_root / "cifar-10-batches-py" / "data_batch_3"
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, payload]}
    path.write_bytes(pickle.dumps(payload if where == "whole file" else batch, protocol=2))
    with pytest.raises(NasError) as info:
        get_task("cifar", root=str(cifar10_root))
    _one_line(info, path)
    assert "refusing to load it" in str(info.value)
    assert kind.split(".")[1] in str(info.value)  # os.system pickles as posix.system
    assert not marker.exists()


def test_nas_train_on_a_crafted_cifar_file_is_one_line_and_exit_2(cifar10_root: Path,
                                                                  tmp_path: Path,
                                                                  capsys) -> None:
    marker = tmp_path / "pwned"
    path = cifar10_root / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps(_payloads(marker)["os.system"]))
    code = nas_main(["train", "deit-tiny", "--task", "cifar", "--task-set",
                     f"root={cifar10_root}", "--epochs", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"CIFAR batch '{path}' holds a pickled posix.system" in err
    assert "Traceback" not in err and not marker.exists()
