"""Prepared task data (``trainers.tasks.cache``): parsed once per node, checked before use.

The tiny dataset files are ``test_datasets``'s fixtures. Each test has its own cache folder
(``NAS_DATA_CACHE``); concurrent builders are real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_datasets import DIM, _npz, _png, _write_json
from test_datasets import coco_root as coco_root  # the fixtures, used by name
from test_datasets import folder_root as folder_root
from test_datasets import vqa_root as vqa_root

import trainers.tasks.vqa_files as vqa_files
from nas.errors import NasError
from nas_cli.main import main as nas_main
from trainers.tasks import TaskData, get_task, prepare_task
from trainers.tasks.cache import CACHE_ENV

REPO = Path(__file__).resolve().parents[1]
OPTIONS: dict[str, dict[str, Any]] = {
    "vqa-files": {"region_dim": DIM, "max_regions": 6, "min_count": 1},
    "coco-files": {"region_dim": DIM, "max_regions": 5, "min_count": 2, "max_words": 4},
    "image-folder": {"image_size": 8},
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def roots(vqa_root: Path, coco_root: Path, folder_root: Path) -> dict[str, Path]:
    # the three fixtures write into one tmp_path: their files do not overlap
    return {"vqa-files": vqa_root, "coco-files": coco_root, "image-folder": folder_root}


def _items(data: TaskData) -> list[Any]:
    """Every item of both splits (captions' random training draw seeded per item)."""
    out = []
    for split in (data.train, data.val):
        for i in range(len(split)):
            torch.manual_seed(i)
            out.append(split[i])
    return out


def _same_items(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], torch.Tensor):
                assert x[key].dtype == y[key].dtype and torch.equal(x[key], y[key]), key
            else:
                assert x[key] == y[key], key


@pytest.mark.parametrize("task", list(OPTIONS))
def test_the_prepared_task_is_the_parsed_one(task: str, roots: dict[str, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    options = {"root": str(roots[task]), **OPTIONS[task]}
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # cannot be made: parsed in memory
    assert prepare_task(task, **options).path is None
    parsed = get_task(task, **options)

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = prepare_task(task, **options)
    assert first.built and first.path is not None and first.path.parent == tmp_path / "cache"
    built = get_task(task, **options)  # opens what prepare_task wrote
    again = prepare_task(task, **options)
    assert not again.built and again.path == first.path
    assert again.items("train") == len(parsed.train) and again.items("val") == len(parsed.val)
    for data in (built, get_task(task, **options)):
        assert (data.geometry, data.metric, data.words) == (
            parsed.geometry, parsed.metric, parsed.words)
        assert data.chance == pytest.approx(parsed.chance, abs=1e-6)
        _same_items(_items(data), _items(parsed))


def _largest_array(folder: Path) -> Path:
    return max(folder.glob("*.npy"), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("breakage", ["version", "store version", "options", "changed source",
                                      "truncated array", "missing array", "unreadable manifest",
                                      "a file outside"])
def test_a_prepared_folder_is_checked_before_use(breakage: str, vqa_root: Path, cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    options = {"root": str(vqa_root), **OPTIONS["vqa-files"]}
    first = prepare_task("vqa-files", **options)
    assert first.built and first.path is not None
    before = _items(get_task("vqa-files", **options))
    manifest_path = first.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if breakage == "version":
        monkeypatch.setattr(vqa_files, "VERSION", vqa_files.VERSION + 1)
    elif breakage in ("store version", "options", "a file outside"):
        if breakage == "store version":
            manifest["store_version"] += 1
        elif breakage == "options":
            manifest["key"]["min_count"] = 2  # as if another option set had written here
        else:  # an array named by a path: never opened
            manifest["arrays"]["../../outside"] = manifest["arrays"].pop("words.blob")
        manifest_path.write_text(json.dumps(manifest))
    elif breakage == "changed source":
        path = vqa_root / "v2_OpenEnded_mscoco_train2014_questions.json"
        questions = json.loads(path.read_text())
        questions["questions"] = questions["questions"][:2]
        _write_json(path, questions)
    elif breakage == "truncated array":
        array = _largest_array(first.path)
        os.truncate(array, array.stat().st_size - 8)
    elif breakage == "missing array":
        _largest_array(first.path).unlink()
    else:
        manifest_path.write_text('{"store_version": 1, "vers')

    second = prepare_task("vqa-files", **options)
    assert second.built and second.path == first.path
    after = get_task("vqa-files", **options)
    if breakage == "changed source":  # the third question is gone, and its answer "yes"
        assert (len(after.train), after.geometry.num_outputs) == (2, 2)
    else:
        _same_items(_items(after), before)
    assert not prepare_task("vqa-files", **options).built  # and it is trusted again
    written = json.loads(manifest_path.read_text())
    assert written["version"] == vqa_files.VERSION and written["key"]["min_count"] == 1


def test_changed_feature_and_image_folders_are_listed_again(roots: dict[str, Path],
                                                            cache: Path) -> None:
    vqa = {"root": str(roots["vqa-files"]), **OPTIONS["vqa-files"]}
    assert prepare_task("vqa-files", **vqa).built
    (roots["vqa-files"] / "feats/val2014/COCO_val2014_000000000042.jpg.npz").unlink()
    with pytest.raises(NasError, match="no file for image 42"):  # not the stale listing
        get_task("vqa-files", **vqa)

    folder = {"root": str(roots["image-folder"]), **OPTIONS["image-folder"]}
    assert len(get_task("image-folder", **folder).train) == 5
    _png(roots["image-folder"] / "train" / "dog" / "nested" / "deeper" / "x.png", 9)
    data = get_task("image-folder", **folder)  # a new folder below a class folder
    assert len(data.train) == 6 and data.train[5]["label"].item() == 1
    assert not prepare_task("image-folder", **folder).built
    _png(roots["image-folder"] / "train" / "dog" / "nested" / "deeper" / "y.png", 9)
    assert len(get_task("image-folder", **folder).train) == 7  # a file in that folder


def test_a_source_changed_just_after_preparing_is_seen(vqa_root: Path, cache: Path) -> None:
    """Files written, prepared and rewritten within milliseconds (same size, same inode): the
    build waits until the sources' times are older than a tick of the file clock."""
    options = {"root": str(vqa_root), **OPTIONS["vqa-files"]}
    path = vqa_root / "v2_OpenEnded_mscoco_val2014_questions.json"
    text = path.read_text()
    path.write_text(text)  # just modified
    assert prepare_task("vqa-files", **options).built
    with open(path, "r+") as f:  # same size, same file
        f.write(text.replace("dog brown", "cat brown"))
    assert prepare_task("vqa-files", **options).built
    assert get_task("vqa-files", **options).val[0]["question"][2].item() == 2  # "cat"


_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import trainers.tasks.vqa_files as vqa_files
    from trainers.tasks import prepare_task

    parse = vqa_files._parse
    def slow_parse(*args, **kwargs):
        print("parsing", flush=True)
        time.sleep(float(os.environ["PARSE_SECONDS"]))
        return parse(*args, **kwargs)
    vqa_files._parse = slow_parse
    if os.environ.get("KILL_WHILE_WRITING"):
        import trainers.tasks.cache as cache
        write = cache._write
        def killed(folder, *args):
            write(folder, *args)
            (folder / "manifest.json").unlink()
            os.kill(os.getpid(), 9)  # killed before the folder is renamed into place
        cache._write = killed
    open(os.environ["START"] + f".ready-{os.getpid()}", "w").close()
    while not os.path.exists(os.environ["START"]):  # every child starts at once
        time.sleep(0.01)
    options = json.loads(sys.argv[1])
    prepared = prepare_task("vqa-files", **options)
    print(json.dumps({"built": prepared.built, "path": str(prepared.path),
                      "val": prepared.items("val")}))
""")


def _children(n: int, options: dict[str, Any], start: Path, **env: str) -> list[Any]:
    environ = {**os.environ, "PYTHONPATH": str(REPO), "START": str(start), "PARSE_SECONDS": "1",
               **env}
    return [subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(options)], env=environ,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(n)]


@pytest.mark.slow
def test_concurrent_first_users_prepare_once(vqa_root: Path, cache: Path,
                                             tmp_path: Path) -> None:
    options = {"root": str(vqa_root), **OPTIONS["vqa-files"]}
    start = tmp_path / "start"
    children = _children(4, options, start)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("start.ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)  # every child has imported what it needs
    start.write_text("")
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.append(out.splitlines())
    parsed = [lines for lines in results if "parsing" in lines]
    rows = [json.loads(lines[-1]) for lines in results]
    assert len(parsed) == 1 and sum(r["built"] for r in rows) == 1  # one parse, one build
    assert {r["path"] for r in rows} == {str(p) for p in cache.iterdir() if p.is_dir()}
    assert {r["val"] for r in rows} == {2}
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_a_builder_killed_while_writing_leaves_nothing_trusted(vqa_root: Path, cache: Path,
                                                              tmp_path: Path) -> None:
    options = {"root": str(vqa_root), **OPTIONS["vqa-files"]}
    start = tmp_path / "start"
    start.write_text("")
    [child] = _children(1, options, start, PARSE_SECONDS="0", KILL_WHILE_WRITING="1")
    child.communicate(timeout=120)
    assert child.returncode == -9
    assert [p for p in cache.iterdir() if ".tmp-" in p.name]  # its half-written folder
    assert not [p for p in cache.iterdir() if not p.name.startswith(".") and p.is_dir()]
    prepared = prepare_task("vqa-files", **options)  # the lock died with it
    assert prepared.built and prepared.items("val") == 2
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name]


def test_nas_data_prepare(vqa_root: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["data", "prepare", "vqa-files", "--task-set", f"root={vqa_root}",
            "--task-set", "min_count=1", "--json"]
    assert nas_main(args) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["task"], row["built"], row["train"], row["val"]) == ("vqa-files", True, 3, 2)
    assert Path(row["path"]).parent == cache and row["bytes"] > 0
    assert nas_main(args) == 0
    assert json.loads(capsys.readouterr().out)["built"] is False
    assert nas_main(args[:-1]) == 0  # the plain line
    assert "already prepared" in capsys.readouterr().out


@pytest.mark.parametrize("args", [
    ["cifar", "--task-set", "root=/nowhere"],
    ["vqa-files", "--task-set", "root=/nowhere"],
    ["vqa-files", "--task-set", "min_count=0"],
    ["vqa-files", "--task-set", "colour=red"],
    ["no-such-task"],
])
def test_nas_data_prepare_refuses_bad_input(args: list[str], tmp_path: Path, cache: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert nas_main(["data", "prepare", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nas data: error: ") and "\n" not in err, err
    assert not cache.exists() or not any(cache.iterdir())  # nothing written


def test_malformed_files_leave_no_lock_behind(vqa_root: Path, cache: Path) -> None:
    (vqa_root / "v2_mscoco_val2014_annotations.json").write_text("{")
    with pytest.raises(NasError, match="not valid JSON"):
        prepare_task("vqa-files", root=str(vqa_root), min_count=1)
    assert not any(cache.iterdir())


def test_the_driver_reads_the_validation_size_alone(vqa_root: Path, cache: Path) -> None:
    """A study's rungs take the validation size from the prepared data: no feature file is
    read (a broken one is found by the trials, which load features)."""
    import study_helpers as h

    from studies import StudySpec
    from studies._tune import validation_samples

    task = {"name": "vqa-files", "root": str(vqa_root), "min_count": 1, "region_dim": DIM,
            "val_size": 1}
    spec = StudySpec.from_dict(h.study_dict("v", task=task))
    broken = vqa_root / "feats/val2014/COCO_val2014_000000000042.jpg.npz"
    _npz(broken, 3, dim=DIM + 1)
    assert validation_samples(spec) == 1
    assert not prepare_task(**task).built
    with pytest.raises(NasError, match="region_dim"):
        get_task(**task)


def test_strings_round_trip(tmp_path: Path, cache: Path) -> None:
    """File names that are not UTF-8 (as Linux allows) and words of any script survive."""
    from trainers.tasks.cache import Prepared, encode_strings

    strings = ["a", "", "ümlaut", "日本", os.fsdecode(b"caf\xe9.png"), "\ud800"]
    arrays = encode_strings("s", strings)
    prepared = Prepared(None, arrays, {"train": 0, "val": 0}, built=True)
    assert prepared.strings("s").tolist() == strings and prepared.strings("s")[-1] == "\ud800"
    assert np.asarray(arrays["s.offsets"])[-1] == len(arrays["s.blob"])


def test_chunked_strings_are_written_as_the_joined_array(tmp_path: Path, cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A blob given in chunks (an image listing's, one a process) is written byte for byte as
    ``np.save`` writes the joined array, with the offsets across its chunks; and kept joined in
    memory where the cache cannot be written."""
    from trainers.tasks.cache import Built, encode_strings, open_or_build, string_arrays

    strings = ["a/b.png", "", "c/ümlaut.JPEG", os.fsdecode(b"d/caf\xe9.png"), "e", "f/g"]
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    cuts = [(0, 2), (2, 2), (2, 6)]  # an empty chunk too
    text = [b"".join(encoded[a:b]) for a, b in cuts]
    lengths = [np.array([len(e) for e in encoded[a:b]], dtype=np.int64).tobytes()
               for a, b in cuts]
    chunked = string_arrays("s", [memoryview(t) for t in text], lengths)
    joined = encode_strings("s", strings)
    assert np.array_equal(chunked["s.offsets"], joined["s.offsets"])  # type: ignore[arg-type]
    built = Built(chunked, {"train": 0, "val": 0})
    prepared = open_or_build("chunks", {"k": 1}, [], lambda: built, version=1)
    assert prepared.path is not None and prepared.strings("s").tolist() == strings
    np.save(tmp_path / "joined.npy", joined["s.blob"], allow_pickle=False)
    assert ((prepared.path / "s.blob.npy").read_bytes()
            == (tmp_path / "joined.npy").read_bytes())
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(unwritable / "cache"))  # under a file: cannot be made
    in_memory = open_or_build("chunks", {"k": 2}, [], lambda: built, version=1)
    assert in_memory.path is None and in_memory.strings("s").tolist() == strings


def _odd_image_folder(root: Path) -> None:
    """A split whose class folders hold what ImageFolder's listing must get right: sub-folders,
    a folder named like an image, links to a folder and to a file, a dangling link, upper- and
    mixed-case extensions, a name that is not UTF-8, and files that are not images."""
    for i in range(7):
        cls = root / f"c{i}"
        (cls / "deep" / "deeper").mkdir(parents=True)
        for name in ("b.png", "a.JPG", "c.Jpeg", "z.txt", "deep/x.webp", "deep/deeper/y.bmp"):
            (cls / name).write_bytes(b"")
        (cls / "dir.png").mkdir()
        (cls / "dir.png" / "inside.ppm").write_bytes(b"")
    (root / "c0" / os.fsdecode(b"caf\xe9.png")).write_bytes(b"")
    (root / "c1" / "linked.png").symlink_to(root / "c0" / "b.png")
    (root / "c2" / "folder-link").symlink_to(root / "c3" / "deep", target_is_directory=True)
    (root / "c4" / "dangling.png").symlink_to(root / "nowhere.png")
    (root / "c5" / "UPPER.TIFF").write_bytes(b"")


def _count_helpers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Helper processes each given one class folder at least; the list of those started."""
    import trainers.tasks._files as files

    monkeypatch.setattr(files, "_CLASSES_PER_PROCESS", 1)
    starts = []
    popen = subprocess.Popen

    def counted(*args: Any, **kwargs: Any) -> Any:
        starts.append(args)
        return popen(*args, **kwargs)

    monkeypatch.setattr(files.subprocess, "Popen", counted)
    return starts


@pytest.mark.parametrize("processes", [1, 3])
def test_the_image_listing_is_torchvisions(tmp_path: Path, processes: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing equals torchvision's own ``make_dataset``, listed here alone or by helper
    processes (each given at least one class folder here)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    import trainers.tasks._files as files

    split = tmp_path / "train"
    _odd_image_folder(split)
    classes, index = find_classes(str(split))
    expected = make_dataset(str(split), index, IMG_EXTENSIONS)
    starts = _count_helpers(monkeypatch)
    (listed,) = files.list_classes([(split, classes)], IMG_EXTENSIONS, processes=processes)
    assert len(listed.text) == len(listed.lengths) == processes  # a chunk a process
    text = b"".join(listed.text)
    ends = np.cumsum(np.frombuffer(b"".join(listed.lengths), dtype=np.int64)).tolist()
    names = [text[a:b].decode("utf-8", "surrogatepass")
             for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    got = [(str(split / name), i) for name, i in zip(
        names, np.repeat(np.arange(len(classes)), listed.counts).tolist(), strict=True)]
    assert got == expected and len(starts) == processes - 1
    assert any("dangling" in p for p, _ in got) and not any(p.endswith("dir.png") for p, _ in got)


@pytest.mark.parametrize("files", [
    ["a.png", "b.png", "c.png"],  # one extension: the quick path
    ["a.png", "b.png", "c.txt"], ["a.txt", "b.png", "c.png"], ["a.png", "b.txt", "c.png"],
    ["a.png", "b.png.txt", "c.png"], ["a.png.png", ".png", "b.PNG", "c.png"],
    ["a.JPEG", "b.jpeg", "c.Jpeg"], ["noext", "b.png"], ["a.png"], ["a.txt"], [],
    [os.fsdecode(b"caf\xe9.png"), "b.png"]])
def test_the_image_filter_is_imagefolders(files: list[str]) -> None:
    """The names kept are those whose lower-cased form ends with an image extension (the test
    of torchvision's ``has_file_allowed_extension``), the quick path included."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    import trainers.tasks._files as files_module

    exts = tuple(e.lower() for e in IMG_EXTENSIONS)
    both = exts + tuple(e.upper() for e in exts)
    got = files_module._images(list(files), exts, both)
    assert got == [f for f in files if has_file_allowed_extension(f, IMG_EXTENSIONS)]


@pytest.mark.parametrize("helper", ["cannot start", "fails", "answers nothing"])
def test_a_failed_listing_helper_is_listed_again_here(folder_root: Path, cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     helper: str) -> None:
    import trainers.tasks._files as files

    alone = get_task("image-folder", root=str(folder_root), image_size=8)
    expected = (alone.train.names.tolist(), alone.val.names.tolist())  # type: ignore[attr-defined]
    starts = _count_helpers(monkeypatch)
    monkeypatch.setattr(files, "_processes", lambda: 3)
    executable = {"cannot start": str(folder_root / "no-python"), "fails": "false",
                  "answers nothing": "true"}[helper]  # "true" exits 0 with no output
    monkeypatch.setattr(files.sys, "executable", executable)
    monkeypatch.setenv(CACHE_ENV, str(cache / "again"))
    prepared = prepare_task("image-folder", root=str(folder_root), image_size=8)
    assert prepared.built and len(starts) == 2
    assert (prepared.strings("train.images").tolist(),
            prepared.strings("val.images").tolist()) == expected


def test_the_fast_and_the_checked_vqa_readers_agree(vqa_root: Path) -> None:
    from trainers.tasks import _vqa_read

    paths = (vqa_root / "v2_OpenEnded_mscoco_train2014_questions.json",
             vqa_root / "v2_mscoco_train2014_annotations.json")
    fast = _vqa_read._typed(*paths, None)
    assert fast is not None and fast == _vqa_read._checked(*paths, None)
    assert _vqa_read._typed(*paths, 2) == _vqa_read._checked(*paths, 2)


def _retyped(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data)
    _write_json(path, data)


def test_files_outside_the_typed_layout_load_alike(vqa_root: Path, coco_root: Path,
                                                  cache: Path) -> None:
    """Ids written as strings, a numeric answer: the checked reader reads them as before."""
    vqa = {"root": str(vqa_root), **OPTIONS["vqa-files"]}
    coco = {"root": str(coco_root), **OPTIONS["coco-files"]}
    before = [_items(get_task("vqa-files", **vqa)), _items(get_task("coco-files", **coco))]

    def vqa_questions(data: dict[str, Any]) -> None:
        data["questions"][2]["image_id"] = "25"

    def vqa_answers(data: dict[str, Any]) -> None:
        data["annotations"][1]["answers"][0]["answer"] = 2  # "2" as a number

    def coco_ids(data: dict[str, Any]) -> None:
        data["images"][2]["cocoid"] = "3"

    _retyped(vqa_root / "v2_OpenEnded_mscoco_train2014_questions.json", vqa_questions)
    _retyped(vqa_root / "v2_mscoco_train2014_annotations.json", vqa_answers)
    _retyped(coco_root / "dataset_coco.json", coco_ids)
    from trainers.tasks import _vqa_read, coco_files

    assert _vqa_read._typed(vqa_root / "v2_OpenEnded_mscoco_train2014_questions.json",
                            vqa_root / "v2_mscoco_train2014_annotations.json", None) is None
    images = coco_files._images(coco_root / "dataset_coco.json")
    assert isinstance(images[0].sentences[0], dict)  # the checked reader's: read as written
    assert prepare_task("vqa-files", **vqa).built and prepare_task("coco-files", **coco).built
    _same_items(_items(get_task("vqa-files", **vqa)), before[0])
    _same_items(_items(get_task("coco-files", **coco)), before[1])


def test_lowercase_captions_load_as_the_checked_reader_loads_them(coco_root: Path,
                                                                  cache: Path) -> None:
    """Karpathy's tokens are lowercase already: the typed reader keeps such words as decoded
    (no copy per sentence), and what it prepares is what the checked reader's lowering
    prepares, word for word."""
    path = coco_root / "dataset_coco.json"

    def lowercase(data: dict[str, Any]) -> None:
        for image in data["images"]:
            for sentence in image["sentences"]:
                sentence["tokens"] = [t.lower() for t in sentence["tokens"]]

    _retyped(path, lowercase)
    coco = {"root": str(coco_root), **OPTIONS["coco-files"]}
    from trainers.tasks import coco_files

    assert not isinstance(coco_files._images(path)[0].sentences[0], dict)  # typed records
    typed = get_task("coco-files", **coco)
    assert typed.words == ("a", "cat", "dog", "mat", "on")  # seen twice in training
    before = (typed.words, typed.chance, _items(typed))
    _retyped(path, lambda data: data["images"][2].update(cocoid="3"))  # the checked reader
    assert isinstance(coco_files._images(path)[0].sentences[0], dict)
    assert prepare_task("coco-files", **coco).built
    checked = get_task("coco-files", **coco)
    assert before[0] == checked.words and before[1] == pytest.approx(checked.chance)
    _same_items(before[2], _items(checked))


@pytest.mark.parametrize("task", ["vqa-files", "coco-files"])
def test_loader_workers_train_what_the_loop_alone_trains(task: str, roots: dict[str, Path],
                                                         cache: Path) -> None:
    """``loader_workers`` forks processes that read the prepared task's memory maps and
    feature files; a VQA run is the same to the last digit, a caption run (whose training
    caption is drawn per item) stays a seeded, finished run."""
    from tiny_models import fast, tiny

    from trainers import train

    config = tiny("mcan" if task == "vqa-files" else "ort-word")
    data = get_task(task, root=str(roots[task]), **OPTIONS[task])
    runs = [train(config, fast(epochs=2, batch_size=2, loader_workers=workers), data)
            for workers in (0, 2, 2)]
    assert all(r.status == "completed" for r in runs), [r.reason for r in runs]
    losses = [[e["train_loss"] for e in r.epochs] for r in runs]
    assert losses[1] == losses[2]  # seeded with workers too
    if task == "vqa-files":
        assert losses[0] == losses[1] and runs[0].value == runs[1].value
