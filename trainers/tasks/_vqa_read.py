"""Reading one split of VQA v2's JSON files (``vqa-files``) into columns.

Two readers give the same :class:`VqaSplit`. The fast one decodes the files with msgspec into
typed records that hold only the fields the task uses (no dict per answer, no field it skips):
VQA v2's 347 MB of training annotations parse several times faster, in a fraction of the
memory. Any file it cannot decode as the well-formed layout (malformed JSON, a missing field, an
unexpected type, such as a numeric answer or an image id written as a string) goes to the
checked reader: the standard library's ``json`` and a check of every record, which accepts
what the format allows and names the file and the entry of what it refuses.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from nas.errors import NasError
from trainers.tasks._io import json_records, read_json

__all__ = ["VqaSplit", "read_split"]


@dataclass(frozen=True)
class VqaSplit:
    """A split's questions as columns, and their annotators' answers by question id: the
    ``multiple_choice_answer`` (None where the file has none) and every ``answer``, as written."""

    image_ids: list[int]
    texts: list[str]
    question_ids: list[Hashable]
    answers: dict[Hashable, tuple[str | None, list[str]]]


class _Question(msgspec.Struct):
    image_id: int
    question: str
    question_id: int


class _Questions(msgspec.Struct):
    questions: list[_Question]


class _Answer(msgspec.Struct):
    answer: str


class _Annotation(msgspec.Struct):
    question_id: int
    answers: list[_Answer]
    multiple_choice_answer: str | msgspec.UnsetType = msgspec.UNSET


class _Annotations(msgspec.Struct):
    annotations: list[_Annotation]


_QUESTIONS = msgspec.json.Decoder(_Questions)
_ANNOTATIONS = msgspec.json.Decoder(_Annotations)


def _typed(questions_path: Path, annotations_path: Path, limit: int | None) -> VqaSplit | None:
    """The fast reader; None where a file is not the well-formed layout."""
    try:
        questions = _QUESTIONS.decode(questions_path.read_bytes()).questions[:limit]
        if not questions:
            return None  # the checked reader says which file holds none
        annotations = _ANNOTATIONS.decode(annotations_path.read_bytes()).annotations
    except (OSError, msgspec.DecodeError):  # a validation error is a DecodeError too
        return None
    answers: dict[Hashable, tuple[str | None, list[str]]] = {
        a.question_id: (None if isinstance(a.multiple_choice_answer, msgspec.UnsetType)
                        else a.multiple_choice_answer, [x.answer for x in a.answers])
        for a in annotations}
    return VqaSplit([q.image_id for q in questions], [q.question for q in questions],
                    [q.question_id for q in questions], answers)


def _checked(questions_path: Path, annotations_path: Path, limit: int | None) -> VqaSplit:
    """The checked reader: every record's fields and types, one line naming the file."""
    questions = json_records(read_json(questions_path, "VQA questions file"), "questions",
                             questions_path, "VQA questions file",
                             ("image_id", "question", "question_id"))[:limit]
    if not questions:
        raise NasError(f"VQA questions file '{questions_path}' holds no questions.")
    annotations = json_records(read_json(annotations_path, "VQA annotations file"),
                               "annotations", annotations_path, "VQA annotations file",
                               ("question_id", "answers"))
    for q in questions:
        if not isinstance(q["image_id"], int) and not str(q["image_id"]).isdigit():
            raise NasError(f"VQA questions file '{questions_path}': image_id "
                           f"{q['image_id']!r} of question {q['question_id']} is not a number.")
    answers = {a["question_id"]: _answers(a) for a in annotations}
    return VqaSplit([int(q["image_id"]) for q in questions],
                    [str(q["question"]) for q in questions],
                    [q["question_id"] for q in questions], answers)


def _answers(annotation: dict[str, Any]) -> tuple[str | None, list[str]]:
    given = annotation["answers"]
    raw = [str(a["answer"]) for a in (given if isinstance(given, list) else ())
           if isinstance(a, dict) and "answer" in a]
    main = annotation.get("multiple_choice_answer")
    return (str(main) if "multiple_choice_answer" in annotation else None), raw


def read_split(questions_path: Path, annotations_path: Path, limit: int | None) -> VqaSplit:
    """The split's first ``limit`` questions and the answers of every annotation; raises
    ``NasError`` naming the file for a missing or malformed one, a split without questions or
    a question without an annotation."""
    split = (_typed(questions_path, annotations_path, limit)
             or _checked(questions_path, annotations_path, limit))
    for qid in split.question_ids:
        if qid not in split.answers:
            raise NasError(f"VQA annotations file '{annotations_path}' has no entry for question "
                           f"{qid} of '{questions_path}'.")
    return split
