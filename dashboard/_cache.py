"""The app's loaded studies: one :class:`~dashboard.analysis.StudyView` per study and data
version, over a :class:`~dashboard.reader.StudyReader`, each loaded once however many callbacks
ask for it at the same time (from its front's part where the reader reads that first,
``dashboard.reader.FrontFirst``)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from dashboard.analysis import StudyView
from dashboard.data import StudyInfo
from dashboard.reader import FrontFirst, StudyReader

__all__ = ["StudyCache"]

#: How many (study, version) views are kept; the oldest goes first.
CACHED_STUDIES = 6


class StudyCache:
    """The reader, and a small cache of loaded studies keyed by (study, fingerprint)."""

    def __init__(self, reader: StudyReader) -> None:
        self.reader = reader
        self._views: OrderedDict[tuple[int, str], StudyView] = OrderedDict()
        self._locks: dict[tuple[int, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def info(self, name: str) -> StudyInfo:
        return self.reader.study_info(name)

    def version(self, info: StudyInfo) -> str:
        return self.reader.fingerprint(info)

    def view(self, name: str, version: str | None = None) -> StudyView:
        """The study as of ``version`` (loaded now if not cached; the current one if None)."""
        info = self.info(name)
        version = version or self.version(info)
        key = (info.study_id, version)
        with self._guard:
            if key in self._views:
                self._views.move_to_end(key)
                return self._views[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # the first caller loads; the others wait for its result
            with self._guard:
                if key in self._views:
                    return self._views[key]
            view = self._load(info, version)
            with self._guard:
                self._views[key] = view
                self._locks.pop(key, None)
                while len(self._views) > CACHED_STUDIES:
                    self._views.popitem(last=False)
        return view

    def _load(self, info: StudyInfo, version: str) -> StudyView:
        """The study's front first where the reader can read it so (the rest when asked for)."""
        if isinstance(self.reader, FrontFirst):
            return StudyView(self.reader.load_front(info, version), rest=self.reader.load_rest)
        return StudyView(self.reader.load_study(info, version))
